//! An export on its way out. The blocking task that encodes it writes into a [`ChunkWriter`],
//! which hands chunks of at most [`CHUNK`] bytes to the caller through a channel of
//! [`DEPTH`] chunks; the caller reads them from [`Chunks`]. So an export holds a few chunks in
//! memory however long the session, its first bytes leave before its last are read, and a client
//! that reads slowly slows the encoder instead of filling the daemon's memory.

use std::future::poll_fn;
use std::io::{self, Write};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::TransferError;
use crate::persistence::PersistenceError;

/// The largest chunk: a gRPC client's default message limit (4 MiB) takes it with room to spare.
pub(super) const CHUNK: usize = 1024 * 1024;

/// Chunks written but not yet taken: enough to keep the encoder and the socket both busy.
const DEPTH: usize = 4;

/// The chunks of an export, in order; the chunks are the file.
#[derive(Debug)]
pub struct Chunks {
    rx: mpsc::Receiver<Vec<u8>>,
    /// The encoder, awaited once its channel is closed: its result says whether the chunks
    /// before were the whole export (a failure or a panic is reported, never a short file).
    task: Option<JoinHandle<Result<(), TransferError>>>,
}

impl Chunks {
    /// Runs `encode` on the blocking pool, writing into the chunks returned.
    pub(super) fn spawn(
        encode: impl FnOnce(&mut ChunkWriter) -> Result<(), TransferError> + Send + 'static,
    ) -> Self {
        let (tx, rx) = mpsc::channel(DEPTH);
        let task = tokio::task::spawn_blocking(move || {
            let mut out = ChunkWriter {
                tx,
                buf: Vec::with_capacity(CHUNK),
                gone: false,
            };
            encode(&mut out)?;
            out.flush().map_err(|e| failed(&e))
        });
        Self {
            rx,
            task: Some(task),
        }
    }

    /// The next chunk; `None` after the last; an error ends the export (what came before it is
    /// not a whole file).
    pub fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Vec<u8>, TransferError>>> {
        if let Some(chunk) = std::task::ready!(self.rx.poll_recv(cx)) {
            return Poll::Ready(Some(Ok(chunk)));
        }
        let Some(task) = self.task.as_mut() else {
            return Poll::Ready(None);
        };
        let done = std::task::ready!(Pin::new(task).poll(cx));
        self.task = None;
        Poll::Ready(match done {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(Err(e)),
            Err(e) => Some(Err(failed(&e))),
        })
    }

    /// [`poll_next`](Self::poll_next) as a future.
    pub async fn next(&mut self) -> Option<Result<Vec<u8>, TransferError>> {
        poll_fn(|cx| self.poll_next(cx)).await
    }
}

/// Where an export is written: whole chunks go to [`Chunks`] as they fill.
#[derive(Debug)]
pub(super) struct ChunkWriter {
    tx: mpsc::Sender<Vec<u8>>,
    buf: Vec<u8>,
    /// The reader went away (the client hung up): the first write after that fails, which stops
    /// the encoder; later ones (the ZIP writer finishing its archive as it is dropped) are
    /// dropped quietly.
    gone: bool,
}

impl ChunkWriter {
    fn send(&mut self) -> io::Result<()> {
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK));
        if self.tx.blocking_send(chunk).is_err() {
            self.gone = true;
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the export's reader went away",
            ));
        }
        Ok(())
    }
}

impl Write for ChunkWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.gone {
            return Ok(data.len());
        }
        let n = data.len().min(CHUNK - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == CHUNK {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.gone || self.buf.is_empty() {
            return Ok(());
        }
        self.send()
    }
}

/// An export that failed on the way: why, as the store's task errors say it.
pub(super) fn failed(e: &dyn std::fmt::Display) -> TransferError {
    PersistenceError::Task {
        what: "export",
        message: e.to_string(),
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every chunk the export's reader gets until the end or an error, and that error.
    async fn read_all(mut chunks: Chunks) -> (Vec<Vec<u8>>, Option<TransferError>) {
        let mut got = Vec::new();
        while let Some(next) = chunks.next().await {
            match next {
                Ok(chunk) => got.push(chunk),
                Err(e) => return (got, Some(e)),
            }
        }
        (got, None)
    }

    #[tokio::test]
    async fn the_chunks_are_what_was_written_in_order_and_none_is_over_the_limit() {
        let written: Vec<u8> = (0..3 * CHUNK + 12_345).map(|i| (i % 251) as u8).collect();
        let source = written.clone();
        let chunks = Chunks::spawn(move |out| {
            // Pieces that straddle chunk boundaries, as a ZIP writer's are.
            for piece in source.chunks(300_007) {
                out.write_all(piece).map_err(|e| failed(&e))?;
            }
            Ok(())
        });
        let (got, error) = read_all(chunks).await;
        assert!(error.is_none(), "{error:?}");
        assert!(got.iter().all(|c| !c.is_empty() && c.len() <= CHUNK));
        assert_eq!(got.len(), 4);
        assert_eq!(got.concat(), written);
    }

    #[tokio::test]
    async fn an_encoder_that_fails_ends_the_chunks_with_its_error() {
        let chunks = Chunks::spawn(|out| {
            out.write_all(&vec![7; 2 * CHUNK]).map_err(|e| failed(&e))?;
            Err(failed(&"the log shrank while it was read"))
        });
        let (got, error) = read_all(chunks).await;
        assert_eq!(got.len(), 2);
        let error = error.expect("the failure reaches the reader").to_string();
        assert!(error.contains("the log shrank"), "{error}");
    }

    #[tokio::test]
    async fn an_encoder_that_panics_is_an_error_not_a_short_file() {
        let chunks = Chunks::spawn(|out| {
            out.write_all(&vec![7; CHUNK]).map_err(|e| failed(&e))?;
            panic!("a bug in an encoder");
        });
        let (got, error) = read_all(chunks).await;
        assert_eq!(got.len(), 1);
        assert!(error.is_some(), "a panicked export ended as if whole");
    }

    #[tokio::test]
    async fn a_reader_that_goes_away_stops_the_encoder() {
        let (stopped_tx, stopped_rx) = tokio::sync::oneshot::channel();
        let mut chunks = Chunks::spawn(move |out| {
            // An endless export: only its reader going away ends it.
            let error = loop {
                if let Err(e) = out.write_all(&[1; 64 * 1024]) {
                    break e;
                }
            };
            let _ = stopped_tx.send(error.kind());
            Ok(())
        });
        assert!(chunks.next().await.is_some());
        drop(chunks);
        assert_eq!(
            stopped_rx.await.expect("the encoder ended"),
            io::ErrorKind::BrokenPipe
        );
    }
}
