//! The kubelet's /healthz, asked over plain HTTP on loopback.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long one probe may take, connect to status line.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Why the kubelet's /healthz did not answer 200.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unhealthy {
    #[error("connect {endpoint}: {source}")]
    Connect {
        endpoint: String,
        source: std::io::Error,
    },
    #[error("/healthz {op}: {source}")]
    Io {
        op: &'static str,
        source: std::io::Error,
    },
    #[error("/healthz answered {0:?}")]
    Status(String),
    #[error("/healthz timed out")]
    TimedOut,
}

/// GET /healthz over plain HTTP on loopback; Ok when the answer is 200.
pub(crate) async fn probe_healthz(host: &str, port: u16) -> Result<(), Unhealthy> {
    let io = |op| move |source| Unhealthy::Io { op, source };
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect((host, port))
            .await
            .map_err(|source| Unhealthy::Connect {
                endpoint: format!("{host}:{port}"),
                source,
            })?;
        let request = format!("GET /healthz HTTP/1.0\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.map_err(io("send"))?;
        let mut head = [0u8; 64];
        let mut got = 0;
        while got < 12 {
            let n = stream.read(&mut head[got..]).await.map_err(io("read"))?;
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
            Err(Unhealthy::Status(
                line.lines().next().unwrap_or("").trim().to_owned(),
            ))
        }
    };
    match tokio::time::timeout(PROBE_TIMEOUT, attempt).await {
        Ok(r) => r,
        Err(_) => Err(Unhealthy::TimedOut),
    }
}
