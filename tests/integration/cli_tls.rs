//! `cairn … --server https://…`: the CLI's client speaks TLS (rustls) and
//! trusts the system's roots, `SSL_CERT_FILE` included. A TLS proxy with a
//! certificate from a test CA fronts a real server.

use crate::common::{cairn_bin, run_to_end, served_here, start_req};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls;

/// A CA, and a `localhost` certificate it signed: (CA PEM, cert DER, key DER).
fn test_ca() -> (String, Vec<u8>, Vec<u8>) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "cairn test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    (ca.pem(), cert.der().to_vec(), key.serialize_der())
}

/// Terminates TLS on 127.0.0.1 and forwards to `upstream`.
async fn tls_proxy(upstream: String, cert: Vec<u8>, key: Vec<u8>) -> u16 {
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![rustls::pki_types::CertificateDer::from(cert)],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.into()),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let (acceptor, upstream) = (acceptor.clone(), upstream.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(client).await else {
                    return;
                };
                let mut server = TcpStream::connect(&upstream).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut server).await;
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_reaches_a_server_over_https_trusting_ssl_cert_file() {
    let (tmp, rt, base) = served_here(None).await;
    let (started, _, _) = run_to_end(&rt, start_req("echo", "over tls"), None).await;
    let (ca_pem, cert, key) = test_ca();
    let ca_file = tmp.path().join("ca.pem");
    std::fs::write(&ca_file, ca_pem).unwrap();
    let port = tls_proxy(base.trim_start_matches("http://").to_string(), cert, key).await;
    let url = format!("https://localhost:{port}");
    let trusted = tokio::process::Command::new(cairn_bin().get_program())
        .args(["ls", "--server", &url])
        .env("SSL_CERT_FILE", &ca_file)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&trusted.stdout);
    let stderr = String::from_utf8_lossy(&trusted.stderr);
    assert!(trusted.status.success(), "{stderr}");
    assert!(stdout.contains(&started.session_id.to_string()), "{stdout}");
    // Without the CA the certificate is refused, with a message that says so.
    let empty = tempfile::tempdir().unwrap();
    let untrusted = tokio::process::Command::new(cairn_bin().get_program())
        .args(["ls", "--server", &url])
        .env("SSL_CERT_FILE", empty.path().join("no-such-ca.pem"))
        .env("SSL_CERT_DIR", empty.path())
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&untrusted.stderr);
    assert!(!untrusted.status.success(), "an unknown CA must be refused");
    assert!(
        stderr.to_lowercase().contains("certificate") || stderr.contains("cannot reach"),
        "{stderr}"
    );
}
