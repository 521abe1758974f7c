//! Both stores against the one conformance suite.

use loom_kernel::conformance::{self, StoreHarness};
use loom_kernel::{DiskStore, MemoryStore};

struct Memory;

impl StoreHarness for Memory {
    type Store = MemoryStore;
    fn fresh(&mut self) -> MemoryStore {
        MemoryStore::new()
    }
    fn reopen(&mut self, store: MemoryStore) -> MemoryStore {
        store
    }
}

struct Disk {
    dir: tempfile::TempDir,
    opened: usize,
}

impl StoreHarness for Disk {
    type Store = DiskStore;
    fn fresh(&mut self) -> DiskStore {
        self.opened += 1;
        DiskStore::open(self.dir.path().join(format!("store-{}.redb", self.opened))).unwrap()
    }
    fn reopen(&mut self, store: DiskStore) -> DiskStore {
        let path = store.path().to_path_buf();
        drop(store);
        DiskStore::open(path).unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_conforms() {
    conformance::run_all(&mut Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_store_conforms() {
    let mut disk = Disk {
        dir: tempfile::tempdir().unwrap(),
        opened: 0,
    };
    conformance::run_all(&mut disk).await;
}

/// `EventStoreExt::executions` goes across listing pages, in id order, each execution once.
#[tokio::test]
async fn every_execution_is_listed_across_pages() {
    use futures::TryStreamExt;
    use loom_kernel::conformance::{id, started};
    use loom_kernel::{EventStore, EventStoreExt};

    let store = MemoryStore::new();
    let mut expected = Vec::new();
    for n in 0..600 {
        let e = id(&format!("e{n:04}"));
        store.append(&e, 0, &[started("f")]).await.unwrap();
        expected.push(e);
    }
    let listed: Vec<_> = store
        .executions()
        .map_ok(|summary| summary.id)
        .try_collect()
        .await
        .unwrap();
    assert_eq!(listed, expected);
    // The plain call lists the same, and the stream needs no pinning to be polled.
    let all = store.list_all_executions().await.unwrap();
    assert_eq!(all.into_iter().map(|s| s.id).collect::<Vec<_>>(), expected);
    let mut stream = store.executions();
    let first = stream.try_next().await.unwrap().unwrap();
    assert_eq!(first.id, expected[0]);
}
