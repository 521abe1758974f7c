//! The server stopped the ways operators stop it, as a real process: Ctrl-C (SIGINT) and
//! SIGTERM close the store and exit 0; the admin token is kept beside the store, so a restarted
//! server takes the token open tabs and scripts hold; after a SIGKILL the store's executions,
//! logs and steps in doubt read without a write to its files (docs/STORAGE.md, "Reading a
//! store that was not closed cleanly").

use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use a2ui_callfunction::story::EXECUTION;
use loom_console::{AdminClient, ListFilter};
use loom_kernel::{DataClassification, DiskStore, DiskStoreConfig, ExecutionId};

fn free_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// `a2ui-callfunction server` on `store` at `addr`, with no token from the environment.
fn start_server(store: &Path, addr: SocketAddr) -> Child {
    Command::new(env!("CARGO_BIN_EXE_a2ui-callfunction"))
        .args(["server", "--store"])
        .arg(store)
        .args(["--addr", &addr.to_string()])
        .env_remove("LOOM_ADMIN_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until the server answers the admin API with `token`.
async fn admin_of(addr: SocketAddr, token: &str) -> AdminClient {
    let client = AdminClient::new(&format!("http://{addr}"), token).unwrap();
    for _ in 0..400 {
        if client.counts().await.is_ok() {
            return client;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the server at {addr} did not answer its admin API with the kept token");
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args(["-s", name, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -s {name}");
}

/// The child's exit and what it printed, within 60 s.
fn ended(mut child: Child) -> (std::process::ExitStatus, String) {
    for _ in 0..1200 {
        if let Some(status) = child.try_wait().unwrap() {
            let output = child.wait_with_output().unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            return (status, text);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    panic!("the server did not stop within 60 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_and_sigterm_stop_the_server_cleanly_and_a_restart_keeps_the_admin_token() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("loom.redb");
    let addr = free_addr();
    let server = start_server(&store, addr);
    let token_file = dir.path().join("loom.redb.admin-token");
    for _ in 0..400 {
        if token_file.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let token = std::fs::read_to_string(&token_file).unwrap();
    let token = token.trim();
    assert_eq!(
        std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let admin = admin_of(addr, token).await;
    assert_eq!(admin.counts().await.unwrap().total, 1);

    signal(&server, "INT");
    let (status, said) = ended(server);
    assert!(
        status.success(),
        "Ctrl-C is a normal stop: {status}\n{said}"
    );
    assert!(said.contains("SIGINT: the server stops"), "{said}");

    // The same token opens the restarted server's admin API.
    let server = start_server(&store, addr);
    let admin = admin_of(addr, token).await;
    assert_eq!(admin.counts().await.unwrap().total, 1);
    signal(&server, "TERM");
    let (status, said) = ended(server);
    assert!(
        status.success(),
        "SIGTERM is a normal stop: {status}\n{said}"
    );
    assert!(said.contains("SIGTERM: the server stops"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_sigkill_the_stores_executions_logs_and_steps_in_doubt_read_without_a_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("loom.redb");
    let addr = free_addr();
    let server = start_server(&store, addr);
    for _ in 0..400 {
        if dir.path().join("loom.redb.admin-token").exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let token = std::fs::read_to_string(dir.path().join("loom.redb.admin-token")).unwrap();
    admin_of(addr, token.trim()).await;
    signal(&server, "KILL");
    let (status, _) = ended(server);
    assert!(!status.success());

    let journal = dir.path().join("loom.redb.journal");
    let before = (
        std::fs::read(&store).unwrap(),
        std::fs::read(&journal).unwrap(),
    );
    let opened = DiskStore::open_read_only(&store, DiskStoreConfig::default())
        .expect("a store left by a SIGKILL opens read-only");
    let listed = loom_console::list_executions(&opened, &ListFilter::default())
        .await
        .unwrap();
    assert_eq!(listed.executions.len(), 1);
    let id = ExecutionId::new(EXECUTION).unwrap();
    let shown = loom_console::show(&opened, &id, &DataClassification::default())
        .await
        .unwrap();
    assert!(!shown.events.is_empty(), "the log reads");
    loom_console::in_doubt(&opened, loom_console::now_ms())
        .await
        .unwrap();
    drop(opened);
    let after = (
        std::fs::read(&store).unwrap(),
        std::fs::read(&journal).unwrap(),
    );
    assert!(before == after, "a read wrote to the store or its journal");
}
