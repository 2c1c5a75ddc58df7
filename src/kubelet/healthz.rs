//! The kubelet's /healthz, asked over plain HTTP on loopback.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// GET /healthz over plain HTTP on loopback; Ok when the answer is 200.
pub async fn probe_healthz(host: &str, port: u16) -> Result<(), String> {
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect((host, port))
            .await
            .map_err(|e| format!("connect {host}:{port}: {e}"))?;
        let request = format!("GET /healthz HTTP/1.0\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("send: {e}"))?;
        let mut head = [0u8; 64];
        let mut got = 0;
        while got < 12 {
            let n = stream
                .read(&mut head[got..])
                .await
                .map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                break;
            }
            got += n;
        }
        let line = String::from_utf8_lossy(&head[..got]);
        let status = line.split_whitespace().nth(1).unwrap_or("");
        if status == "200" {
            Ok(())
        } else {
            Err(format!(
                "/healthz answered {:?}",
                line.lines().next().unwrap_or("").trim()
            ))
        }
    };
    match tokio::time::timeout(Duration::from_secs(3), attempt).await {
        Ok(r) => r,
        Err(_) => Err("/healthz timed out".into()),
    }
}
