//! A throwaway CA and a server certificate for 127.0.0.1, made with `openssl`, so tests can
//! serve real TLS on loopback and hand the client the CA to trust.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::services::{ServiceError, io, run, which};

const CA_CONFIG: &str = "[req]
distinguished_name = dn
x509_extensions = ext
prompt = no
[dn]
CN = inrun test CA
[ext]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
";

const SERVER_CONFIG: &str = "[req]
distinguished_name = dn
prompt = no
[dn]
CN = 127.0.0.1
[ext]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1,DNS:localhost
authorityKeyIdentifier = keyid
";

/// PEM files for a server on 127.0.0.1 (and `localhost`), signed by a CA of their own.
#[derive(Debug, Clone)]
pub struct TestCerts {
    /// The CA certificate a client trusts.
    pub ca_pem: Vec<u8>,
    /// The server's certificate.
    pub cert_pem: Vec<u8>,
    /// The server's private key (PKCS#8).
    pub key_pem: Vec<u8>,
    /// Where the server certificate is written.
    pub cert_file: PathBuf,
    /// Where the server key is written.
    pub key_file: PathBuf,
}

impl TestCerts {
    /// Makes a P-256 CA and a server certificate valid for two days, in `dir`.
    ///
    /// # Errors
    /// [`ServiceError`] when `openssl` is missing or fails.
    pub fn generate(dir: &Path) -> Result<Self, ServiceError> {
        let openssl = which("openssl")?;
        let file = |name: &str| dir.join(name);
        std::fs::write(file("ca.cnf"), CA_CONFIG).map_err(io("ca.cnf"))?;
        std::fs::write(file("server.cnf"), SERVER_CONFIG).map_err(io("server.cnf"))?;
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let mut ca = Command::new(&openssl);
        ca.args(["req", "-x509", "-days", "2", "-config"])
            .arg(file("ca.cnf"))
            .args(ec)
            .arg("-keyout")
            .arg(file("ca.key"))
            .arg("-out")
            .arg(file("ca.pem"));
        run(ca)?;
        let mut csr = Command::new(&openssl);
        csr.args(["req", "-new", "-config"])
            .arg(file("server.cnf"))
            .args(ec)
            .arg("-keyout")
            .arg(file("server.key"))
            .arg("-out")
            .arg(file("server.csr"));
        run(csr)?;
        let mut sign = Command::new(&openssl);
        sign.args(["x509", "-req", "-days", "2", "-set_serial", "2", "-in"])
            .arg(file("server.csr"))
            .arg("-CA")
            .arg(file("ca.pem"))
            .arg("-CAkey")
            .arg(file("ca.key"))
            .arg("-extfile")
            .arg(file("server.cnf"))
            .args(["-extensions", "ext", "-out"])
            .arg(file("server.pem"));
        run(sign)?;
        let read = |name: &str| std::fs::read(file(name)).map_err(io(name.to_string()));
        Ok(TestCerts {
            ca_pem: read("ca.pem")?,
            cert_pem: read("server.pem")?,
            key_pem: read("server.key")?,
            cert_file: file("server.pem"),
            key_file: file("server.key"),
        })
    }
}
