//! A test result whose failure report ends with the control plane's logs.

use std::fmt;

use crate::controlplane::shared_if_started;

/// The return type for tests: `?` works on any error, and when the test fails libtest
/// prints the error with the end of the etcd and kube-apiserver logs. (Panics get the
/// logs from the hook [`ControlPlane::shared`](crate::ControlPlane::shared) installs; a
/// test returning a plain `anyhow::Result` gets no logs, since it fails without a panic.)
pub type TestResult = Result<(), Failure>;

/// An error that a test returned; its `Debug` form, which libtest prints, carries the
/// logs of the shared control plane.
pub struct Failure(anyhow::Error);

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(err: E) -> Self {
        Self(err.into())
    }
}

impl fmt::Debug for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)?;
        if let Some(control_plane) = shared_if_started() {
            write!(f, "\n{}", control_plane.log_tails())?;
        }
        Ok(())
    }
}
