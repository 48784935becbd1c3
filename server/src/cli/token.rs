//! `gpudash token`: a new token and the auth-file entry that accepts it; `gpudash token add`:
//! that entry appended to the auth file, for a running server to take on SIGHUP.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use team::auth::{Role, add_token, file_entry, hash_token, new_token, valid_user};

/// Flags of `gpudash token`.
#[derive(Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub command: Option<TokenCommand>,
    /// Who the token is for.
    #[arg(long, default_value = "me")]
    pub user: String,
    /// viewer, operator or admin.
    #[arg(long, default_value = "viewer", value_parser = ["viewer", "operator", "admin"])]
    pub role: String,
}

/// What `gpudash token` does besides printing a token.
#[derive(Subcommand, Debug, Clone)]
pub enum TokenCommand {
    /// Add a token for NAME to the auth file and print it once. The file is replaced whole, keeping
    /// its mode and owner (made 0600 if missing); a running server takes it on SIGHUP.
    Add(AddArgs),
}

/// Flags of `gpudash token add`.
#[derive(Args, Debug, Clone)]
pub struct AddArgs {
    /// Who the token is for: 1–64 letters, digits or . _ - @ (the name the audit log shows).
    pub name: String,
    /// viewer, operator or admin.
    pub role: String,
    /// The auth file the server reads (its --auth-file).
    #[arg(long, env = "GPUDASH_AUTH_FILE", value_name = "FILE")]
    pub auth_file: Option<PathBuf>,
}

/// Runs `gpudash token …`: 0 when done, 2 when the name, role or auth file was not given right,
/// 1 when the auth file could not be read or written.
pub fn main(args: &TokenArgs) -> ExitCode {
    let Some(TokenCommand::Add(add)) = &args.command else {
        return print_token(&args.user, &args.role);
    };
    let Some(path) = &add.auth_file else {
        eprintln!("gpudash token add: name the auth file with --auth-file FILE (or GPUDASH_AUTH_FILE)");
        return ExitCode::from(2);
    };
    match add_token(path, &add.name, &add.role) {
        Ok(added) => {
            if added.created {
                println!("created {} (mode 0600: make it readable to the user gpudash runs as)", added.path.display());
            }
            println!("added {} ({}) to {}", add.name, add.role.trim(), added.path.display());
            println!(
                "token (give it to {}; it is shown only now, the file keeps its SHA-256): {}",
                add.name, added.token
            );
            println!("send SIGHUP (systemctl reload gpudash) to apply");
            ExitCode::SUCCESS
        }
        Err(refused) => {
            eprintln!("gpudash token add: {refused}");
            ExitCode::from(if refused.is_usage() { 2 } else { 1 })
        }
    }
}

/// `gpudash token`: the token for the user, the lines for the auth file.
fn print_token(user: &str, role: &str) -> ExitCode {
    if let Err(bad) = valid_user(user) {
        eprintln!("gpudash token: {bad}");
        return ExitCode::from(2);
    }
    let role = Role::parse(role).unwrap_or(Role::Viewer);
    let token = new_token();
    println!("token (give it to {user}; it is not stored anywhere): {token}");
    println!();
    println!("auth file entry:");
    print!("{}", file_entry(user, role, &hash_token(&token)));
    ExitCode::SUCCESS
}
