//! The storage backend chosen with `--store`: opened, with each failure's remedy, by
//! [`acpx_app::store_open`] (over [`acpx_stores`]).

pub use acpx_app::store_open::open;
pub use acpx_stores::OpenStore;
