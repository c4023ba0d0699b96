//! `--timeout` on a prompt: exit 3 (Node's TIMEOUT), the turn recorded as `timeout` in the log
//! and in the snapshot, and the session usable afterwards, with the session owner and with
//! `--no-owner`, on both stores.

use crate::common;

use common::process::{args, last_turn, MODES};
use common::{Env, BACKENDS};

#[test]
fn a_prompt_past_its_timeout_exits_3_and_is_recorded_as_timed_out() {
    for backend in BACKENDS {
        for mode in MODES {
            let env = Env::new(backend);
            let agent = env.agent_cmd("");
            env.run(&args(&agent, mode, &["sessions", "new"])).ok();

            // JSON: the turn's last line is its prompt_error with outcome timeout.
            let r = env.run(&args(
                &agent,
                mode,
                &["--format", "json", "--timeout", "0.5", "slow", "400"],
            ));
            assert_eq!(r.code, 3, "{backend} {mode:?}: {r:?}");
            let last = r.json_lines().pop().unwrap();
            assert_eq!(last["type"], "prompt_error", "{last}");
            assert_eq!(last["payload"]["outcome"], "timeout", "{last}");

            // The log says the same, and so does the snapshot.
            let turn = last_turn(&env, &agent);
            let end = turn.last().unwrap();
            assert_eq!(end["type"], "prompt_error", "{backend} {mode:?}: {end}");
            assert_eq!(end["payload"]["outcome"], "timeout", "{end}");
            let show = env
                .run(&["--format", "json", "--agent", &agent, "sessions", "show"])
                .ok()
                .json();
            assert_eq!(
                show["acpx"]["last_turn"]["outcome"], "timeout",
                "{backend} {mode:?}: {show}"
            );

            // Text: exit 3 with the hint; then the session takes the next prompt.
            let r = env.run(&args(&agent, mode, &["--timeout", "0.5", "slow", "400"]));
            assert_eq!(r.code, 3, "{backend} {mode:?}: {r:?}");
            assert!(r.stderr.contains("--timeout"), "{}", r.stderr);
            let r = env
                .run(&args(&agent, mode, &["--format", "quiet", "echo", "after"]))
                .ok();
            assert_eq!(r.stdout.trim(), "after", "{backend} {mode:?}: {r:?}");
        }
    }
}
