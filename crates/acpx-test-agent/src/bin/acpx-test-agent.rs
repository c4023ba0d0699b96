//! `acpx-test-agent`: a scripted ACP agent speaking on its stdio. The scripts and flags are
//! documented in the [`acpx_test_agent`] crate.

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    acpx_test_agent::serve(std::env::args().skip(1).collect()).await;
}
