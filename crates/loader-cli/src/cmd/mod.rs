//! One module per subcommand.

pub mod attach_points;
pub mod build;
pub mod demo;
pub mod inspect;
pub mod load;
pub mod maps;
pub mod prog;
pub mod prog_dump;
pub mod verify;
