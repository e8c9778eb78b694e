//! Provider overhead per streamed step: the time from the last byte of a streamed response (as the
//! mock server writes it) to the provider returning the parsed reply. The mock pauses before the
//! last piece, so what is measured is the provider's own work (SSE parsing, delta assembly, usage),
//! not the network. Target: median ≤ 1 ms.
//!
//! Run: `cargo bench -p dsh-core --bench openai_overhead`

#![allow(clippy::unwrap_used, clippy::expect_used)] // A bench binary: a failed step aborts it.

use std::time::{Duration, Instant};

use dsh_core::{
    FinishReason, MessageSource, ModelProvider, ModelRequest, OpenAiConfig, OpenAiProvider,
    SessionId,
};
use dsh_session::history::HistoryMessage;
use dsh_testkit::{DONE, Mock, Reply, finish, text_delta, usage_event};
use tokio_util::sync::CancellationToken;

const ROUNDS: usize = 200;
const DELTAS_PER_STEP: usize = 200;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut pieces: Vec<String> = (0..DELTAS_PER_STEP)
            .map(|i| text_delta(&format!("word{i} ")))
            .collect();
        pieces.push(finish("stop"));
        pieces.push(usage_event(1000, 200, 500));
        pieces.push(DONE.into());
        let mock = Mock::start(vec![Reply::Paced { pieces }; ROUNDS]).await;
        let config = OpenAiConfig {
            base_url: mock.base_url.clone(),
            request_timeout: Duration::from_secs(20),
            idle_timeout: Duration::from_secs(20),
            ..OpenAiConfig::default()
        };
        let provider = OpenAiProvider::new(config, Some("sk-bench".into())).unwrap();
        let request = ModelRequest {
            session_id: SessionId::new_v7(),
            system: "You are dsh.".into(),
            messages: vec![HistoryMessage::User {
                text: "hello".into(),
                source: MessageSource::User,
            }].into(),
            tools: Vec::new(),
        };
        let mut samples = Vec::with_capacity(ROUNDS);
        for _ in 0..ROUNDS {
            let reply = provider
                .complete(&request, &CancellationToken::new(), &|_: &str| {})
                .await
                .unwrap();
            let returned = Instant::now();
            assert_eq!(reply.finish, FinishReason::Stop);
            let last = mock.last_byte.lock().unwrap().take().unwrap();
            samples.push(returned.saturating_duration_since(last));
        }
        samples.sort();
        println!(
            "openai provider overhead per streamed step ({ROUNDS} steps of {DELTAS_PER_STEP} text deltas):"
        );
        println!(
            "  last byte -> reply: median {:.3} ms (target <= 1 ms), p90 {:.3} ms, max {:.3} ms",
            ms(samples[ROUNDS / 2]),
            ms(samples[ROUNDS * 9 / 10]),
            ms(samples[ROUNDS - 1])
        );
        dsh_testkit::bench::ratio(
            "openai provider, last byte -> reply / 1 ms",
            &format!("median {:.3} ms", ms(samples[ROUNDS / 2])),
            "1 ms (target)",
            ms(samples[ROUNDS / 2]),
            dsh_testkit::bench::Target::AtMost(1.0),
        );
    });
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
