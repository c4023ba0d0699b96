//! `acpx-test-agent`: a scripted ACP agent speaking on its stdio (see `agent.rs` for the
//! scripts and flags).

mod agent;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    agent::serve(std::env::args().skip(1).collect()).await;
}
