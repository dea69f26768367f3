//! A real Kubernetes control plane for Inrun's end-to-end tests: etcd and kube-apiserver
//! started on 127.0.0.1 (the envtest recipe), with RBAC on and token users.
//!
//! ```no_run
//! use inrun_testenv::{ControlPlane, TestResult};
//!
//! #[tokio::test]
//! async fn something_against_the_api_server() -> TestResult {
//!     let cp = ControlPlane::shared(); // started once per test binary
//!     let client = cp.client(); // a fresh admin client for this test's runtime
//!     let ns = cp.namespace("something").await?; // a namespace of this test's own
//!     // ...
//!     Ok(())
//! }
//! ```
//!
//! When a test fails — a panic, or an `Err` from a test returning [`TestResult`] — the end
//! of the etcd and kube-apiserver logs is printed with the failure.
//!
//! The binaries come from `$INRUN_CONTROLPLANE_BIN`, or from `tests/controlplane/build.sh`,
//! which builds them from Go modules into `~/.cache/inrun/controlplane/` when missing.

mod binaries;
mod controlplane;
mod failure;
pub mod registry;
pub mod services;
mod startup;
mod supervisor;
pub mod tls;
mod wait;

pub use binaries::{BIN_DIR_ENV, BUILD_COMMAND, Binaries, Error as BinariesError};
pub use controlplane::{ADMIN_USER, ControlPlane, UNPRIVILEGED_USER};
pub use failure::{Failure, TestResult};
pub use startup::{AUDITED_NAMESPACE, StartError};
pub use supervisor::Error as ProcessError;
pub use wait::{CrdError, DEFAULT_TIMEOUT, FIELD_MANAGER, Timeout, install_crd, wait_for};
