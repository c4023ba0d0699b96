//! `acpx-test-agent`: a scripted ACP agent speaking on its stdio. The scripts and flags are
//! documented in [`acpx_runtime::test_agent`].

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    acpx_runtime::test_agent::serve(std::env::args().skip(1).collect()).await;
}
