// `sqlx::migrate!` embeds migrations/ at compile time: rebuild this crate
// when a migration is added or changed, not only when its own code changes.
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
