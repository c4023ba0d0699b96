//! Finished replies, tool calls and settled turns of a long-lived session leave memory for
//! spill files and stay whole in every save (docs/format.md decisions 16 and 17), on every
//! backend.
use crate::common;

use acpx_runtime::{text_prompt, RuntimeOptions};
use common::*;

backend_tests! {
    finished_replies_of_a_session_that_lives_on_leave_memory => finished_replies_spilled;
    the_turns_before_the_last_settle_and_stay_whole_everywhere => turns_settle;
    a_turn_s_earlier_messages_leave_memory_while_it_runs => earlier_messages_spilled;
}

/// A session kept open between turns (a queue owner's) moves each finished reply and
/// reasoning text of 256 bytes or more to its spill file, settles the turns before the last
/// into spill files of their own, and every save still writes them whole (docs/format.md
/// decisions 16 and 17).
async fn finished_replies_spilled(env: Env) {
    let texts = |record: &acpx_model::SessionRecord| agent_texts(record, any_text);
    // The texts of the turn still in memory, the last.
    let last_turn_texts = |record: &acpx_model::SessionRecord| {
        let mut tail = record.clone();
        tail.thread.settled = Default::default();
        agent_texts(&tail, any_text)
    };
    let rt = env.runtime(RuntimeOptions::default());
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let id = s.id().clone();
    let long = s.prompt(text_prompt("stream 100")).await.unwrap();
    assert_eq!(long.agent_text.len(), 800);
    let first = last_turn_texts(&s.record().await);
    assert!(first[0].is_spilled(), "the finished long reply left memory");
    s.prompt(text_prompt("hello")).await.unwrap();
    let second = last_turn_texts(&s.record().await);
    assert!(!second[0].is_spilled(), "a short reply stays in memory");
    // Reasoning too: 40 thought chunks, 320 bytes.
    s.prompt(text_prompt("think 40")).await.unwrap();
    let record = s.record().await;
    assert_eq!(
        (record.thread.settled.len(), record.thread.messages.len()),
        (4, 2),
        "the two turns before the last are settled"
    );
    let last = last_turn_texts(&record);
    assert!(
        last[0].is_spilled(),
        "the finished long reasoning left memory"
    );
    assert!(!last[1].is_spilled(), "\"Done thinking.\" stays in memory");
    let live = texts(&record);
    assert_eq!(live.len(), 4, "{live:?}");
    assert_eq!(live[0].to_text().unwrap(), long.agent_text);
    let thought: String = (0..40).map(|i| format!("{i:07} ")).collect();
    assert_eq!(live[2].to_text().unwrap(), thought);
    assert_eq!(live[3].to_text().unwrap(), "Done thinking.");
    // A tool call's input JSON and result text, 1,000 bytes more each.
    s.prompt(text_prompt("tools 1000")).await.unwrap();
    let record = s.record().await;
    // The agent message that holds the read (the reply after it is a message of its own).
    let (a, read) = record
        .thread
        .messages
        .iter()
        .rev()
        .find_map(|m| match m {
            acpx_model::Message::Agent(a) => a.content.iter().find_map(|c| match c {
                acpx_model::AgentContent::ToolUse(t) if t.id.starts_with("call_read") => {
                    Some((a, t))
                }
                _ => None,
            }),
            _ => None,
        })
        .expect("the read tool call");
    assert!(
        read.raw_input.is_spilled(),
        "a finished tool input left memory"
    );
    assert!(read
        .raw_input
        .to_text()
        .unwrap()
        .contains(&"c".repeat(1000)));
    assert!(read.input.is_spilled(), "its JSON value too");
    assert_eq!(read.input.to_value().unwrap()["context"], "c".repeat(1000));
    let result = &a.tool_results[&read.id];
    let acpx_model::ResultContent::Text(text) = &result.content[0] else {
        panic!("a text result")
    };
    assert!(text.is_spilled(), "a finished tool result text left memory");
    assert_eq!(text.len(), "# README".len() + 1000);
    let output = result.output.as_ref().expect("a raw output");
    assert!(output.is_spilled(), "a finished raw output left memory");
    let whole = text.to_text().unwrap().into_owned();
    assert_eq!(*output, serde_json::json!({"bytes": 1008, "text": whole}));
    let grep = read.id.replace("read", "grep");
    let ok = &a.tool_results[&grep].content[0];
    assert!(
        matches!(ok, acpx_model::ResultContent::Text(t) if !t.is_spilled()),
        "a short result stays in memory"
    );
    // The saves at each turn's end wrote the spilled texts whole.
    let stored = env.stored(&id).await;
    assert_eq!(texts(&stored)[..4], live[..]);
    assert_eq!(
        serde_json::to_value(&stored.thread).unwrap(),
        serde_json::to_value(&record.thread).unwrap()
    );
    let fin = s.shutdown().await.unwrap();
    assert_eq!(
        serde_json::to_value(env.stored(&id).await).unwrap(),
        serde_json::to_value(&fin).unwrap()
    );
}

/// A session kept open between turns settles the turns before the last out of memory at
/// each turn's end (docs/format.md decision 17): it holds the last turn only, and its
/// snapshot, search, history and export are the whole conversation, as are those of the
/// session read back.
async fn turns_settle(env: Env) {
    let rt = env.runtime(RuntimeOptions::default());
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let id = s.id().clone();
    for i in 0..5 {
        s.prompt(text_prompt(&format!("echo word{i} \"quoted\"\nline")))
            .await
            .unwrap();
    }
    s.prompt(text_prompt("tools 1000")).await.unwrap();
    let record = s.record().await;
    assert_eq!(record.thread.settled.len(), 10);
    assert!(matches!(
        record.thread.messages[0],
        acpx_model::Message::User(_)
    ));
    assert_eq!(
        record
            .thread
            .messages
            .iter()
            .filter(|m| matches!(m, acpx_model::Message::User(_)))
            .count(),
        1,
        "only the last turn is in memory"
    );
    let count = record.thread.message_count();
    // The stored snapshot is the whole conversation, the bytes the live thread writes.
    let stored = env.stored(&id).await;
    assert!(stored.thread.settled.is_empty());
    assert_eq!(stored.thread.messages.len(), count);
    assert_eq!(
        serde_json::to_string_pretty(&stored.thread).unwrap(),
        serde_json::to_string_pretty(&record.thread).unwrap()
    );
    // Search finds a settled turn's words, at its index in the whole conversation.
    let hits = env
        .store
        .search(&acpx_model::SearchQuery {
            text: "word2".into(),
            cwd: None,
            limit: None,
        })
        .await
        .unwrap();
    let indexes: Vec<_> = hits.iter().map(|h| h.message_index).collect();
    assert_eq!(indexes, [4, 5], "{hits:?}");
    // History and export show every turn.
    let history = acpx_printer::transcript::history_text(&record, None, false);
    assert_eq!(
        history,
        acpx_printer::transcript::history_text(&stored, None, false)
    );
    for i in 0..5 {
        assert!(history.contains(&format!("word{i}")), "{history}");
    }
    let short = acpx_printer::transcript::history_text(&record, Some(3), false);
    assert_eq!(
        short,
        acpx_printer::transcript::history_text(&stored, Some(3), false)
    );
    assert_eq!(
        acpx_printer::transcript::markdown(&record),
        acpx_printer::transcript::markdown(&stored)
    );
    // A turn's token usage settles with it, and still counts in the cumulative usage.
    s.prompt(text_prompt("usage")).await.unwrap();
    let with_usage = s.record().await;
    assert_eq!(with_usage.thread.request_token_usage.len(), 1);
    let cumulative = with_usage.thread.cumulative_token_usage;
    assert!(cumulative.input_tokens > 0, "{cumulative:?}");
    // Another turn settles the last ones too; what the session ends with is stored whole.
    s.prompt(text_prompt("hello")).await.unwrap();
    let record = s.record().await;
    assert_eq!(
        record.thread.settled.len(),
        with_usage.thread.message_count()
    );
    assert_eq!(record.thread.settled.usage_len(), 1);
    assert!(record.thread.request_token_usage.is_empty());
    assert_eq!(record.thread.request_usage_total(), cumulative);
    let count = record.thread.message_count();
    let fin = s.shutdown().await.unwrap();
    let stored = env.stored(&id).await;
    assert_eq!(stored.thread.messages.len(), count);
    assert_eq!(stored.thread.request_token_usage.len(), 1);
    assert_eq!(stored.thread.cumulative_token_usage, cumulative);
    assert_eq!(stored.to_json_vec().unwrap(), fin.to_json_vec().unwrap());
    // And a session opened again settles what it loaded at its first turn's end.
    let mut s = rt.open_existing(&id).await.unwrap();
    s.prompt(text_prompt("echo again")).await.unwrap();
    let record = s.record().await;
    assert_eq!(record.thread.settled.len(), count);
    assert_eq!(record.thread.messages.len(), 2);
    s.shutdown().await.unwrap();
    let stored = env.stored(&id).await;
    assert_eq!(stored.thread.messages.len(), count + 2);
    let history = acpx_printer::transcript::history_text(&stored, None, false);
    assert!(
        history.contains("word0") && history.contains("again"),
        "{history}"
    );
}

/// A turn's messages before the one it writes leave memory while it runs, even in a process
/// that ends with the turn (`--no-owner`): a turn of many tool calls does not hold them all.
/// The conversation that process loaded stays as it was: moving it would only cost I/O.
async fn earlier_messages_spilled(env: Env) {
    let rt = env.runtime(RuntimeOptions::default());
    let s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let id = s.id().clone();
    s.shutdown().await.unwrap();
    let one_turn = |prompt: &'static str| {
        let rt = &rt;
        let id = &id;
        async move {
            let mut s = rt.open_existing(id).await.unwrap();
            let options = acpx_runtime::TurnOptions {
                session_ends_after: true,
                ..Default::default()
            };
            s.prompt_with_options(text_prompt(prompt), options)
                .await
                .unwrap();
            s.shutdown().await.unwrap()
        }
    };
    let first = one_turn("stream 100").await;
    let texts = agent_texts(&first, reply_text);
    assert!(!texts[0].is_spilled(), "a reply that ends its turn stays");
    // Three rounds of calls, each after a step of text: three tool messages, then the reply.
    let second = one_turn("tools 1000 3").await;
    let texts = agent_texts(&second, reply_text);
    assert!(
        !texts[0].is_spilled(),
        "the loaded conversation is left as it was"
    );
    let tool_messages = tool_messages(&second);
    assert_eq!(tool_messages.len(), 3);
    for a in &tool_messages {
        assert_finished_calls_spilled(a);
    }
    // Chained calls without any text: all in the last message, compacted call by call.
    let third = one_turn("tools 1000 3 chained").await;
    let last = match third.thread.messages.last() {
        Some(acpx_model::Message::Agent(a)) => a,
        other => panic!("the turn ends with its tool calls: {other:?}"),
    };
    assert_eq!(last.tool_results.len(), 6);
    assert_finished_calls_spilled(last);
    assert_eq!(
        serde_json::to_value(env.stored(&id).await.thread).unwrap(),
        serde_json::to_value(&third.thread).unwrap()
    );
}

/// The agent messages of `record` that hold tool calls.
fn tool_messages(record: &acpx_model::SessionRecord) -> Vec<&acpx_model::AgentMessage> {
    let agent = record.thread.messages.iter().filter_map(|m| match m {
        acpx_model::Message::Agent(a) if !a.tool_results.is_empty() => Some(a),
        _ => None,
    });
    agent.collect()
}

/// Every read call of `a` (1,000 more bytes in its input, result text and raw output) left
/// memory; the searches' short values stayed.
fn assert_finished_calls_spilled(a: &acpx_model::AgentMessage) {
    for c in &a.content {
        let acpx_model::AgentContent::ToolUse(t) = c else {
            continue;
        };
        let result = &a.tool_results[&t.id];
        let output = result.output.as_ref();
        let acpx_model::ResultContent::Text(text) = &result.content[0] else {
            panic!("a text result")
        };
        if t.id.starts_with("call_read") {
            assert!(t.raw_input.is_spilled() && t.input.is_spilled(), "{}", t.id);
            assert!(text.is_spilled(), "{}", t.id);
            assert!(output.is_some_and(|o| o.is_spilled()), "{}", t.id);
        } else {
            assert!(!t.raw_input.is_spilled() && !text.is_spilled(), "{}", t.id);
        }
    }
}
