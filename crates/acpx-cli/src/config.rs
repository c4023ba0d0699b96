//! Configuration files: `<home>/config.json` (global) and `.acpxrc.json` (project), read and
//! checked by `acpx_app::config_file`, a file that cannot be used explained by
//! `acpx_app::settings::load_config_lenient`. The settings' types are the libraries' own
//! (with their `clap` feature, the flags parse into them too).

pub use acpx_app::config_file::{Backend, ConfigFile as Config, OutputFormat as Format};
#[cfg(test)]
pub use acpx_app::settings::load_config as load;
pub use acpx_app::settings::load_config_lenient as load_lenient;
