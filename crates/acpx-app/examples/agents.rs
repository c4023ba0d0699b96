//! Lists the agent registry (`acpx agents` without the config file's own entries): each
//! built-in name and the command line it starts.
//!
//! `cargo run -p acpx-app --example agents`

fn main() {
    let agents = acpx_app::agents::AgentRegistry::new(&Default::default());
    for (name, command) in agents.entries() {
        println!("{name:12} {command}");
    }
}
