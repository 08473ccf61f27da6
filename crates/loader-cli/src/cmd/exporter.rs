//! `gpubpf exporter [--listen ADDR] [--map NAME[:METRIC]]… [--stats]`: Prometheus metrics
//! of the node over HTTP (`GET /metrics`).
//!
//! Each scrape reads the registry afresh (`exporter_metrics::render`): live processes,
//! per process and attach point calls and denials, per program run counts, run time and
//! faults, failed objects, and the chosen maps as series (`map_series`). With `--stats`
//! the exporter keeps per-program statistics collection switched on while it runs
//! (renewing the control block's deadline every second), as `gpubpf ps --stats` does for
//! a moment; without it, run counts grow only while someone else asks for them.

use std::time::Duration;

use anyhow::Context as _;
use gpubpf_runtime::registry::{monotonic_ns, Registry};

use super::exporter_metrics::render;
use super::map_series::MapChoice;
use crate::output::Output;

/// Arguments of `gpubpf exporter`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to serve on (`GET /metrics`).
    #[arg(long, default_value = "127.0.0.1:9464", value_name = "ADDR:PORT")]
    pub listen: String,
    /// A map to export: each numeric field of its (BTF-typed) values becomes a gauge
    /// `gpubpf_METRIC_FIELD` (METRIC defaults to the map name), its keys labels. Repeatable.
    #[arg(long = "map", value_name = "NAME[:METRIC]")]
    pub maps: Vec<MapChoice>,
    /// Keep per-program run statistics (run counts, run time) collected while serving.
    /// Collection reads the clock twice per program run, so it is off unless asked for.
    #[arg(long)]
    pub stats: bool,
}

/// How long each renewal of `--stats` keeps collection on: past one renewal period, so
/// collection never lapses while the exporter lives, and stops soon after it exits.
const STATS_WINDOW: Duration = Duration::from_secs(3);

/// The registry when there is one (opened lazily: the exporter may start before the first
/// `gpubpf load` creates it).
struct Node {
    reg: Option<Registry>,
}

impl Node {
    fn registry(&mut self) -> Option<&Registry> {
        if self.reg.is_none() {
            match super::existing_registry() {
                Ok(r) => self.reg = r,
                Err(e) => tracing::warn!("{e:#}"),
            }
        }
        self.reg.as_ref()
    }
}

fn renew_stats(reg: &Registry) {
    let until =
        monotonic_ns().saturating_add(u64::try_from(STATS_WINDOW.as_nanos()).unwrap_or(u64::MAX));
    // Another user than a system registry's owner cannot switch statistics on: the
    // exporter then serves counts without run times.
    if let Err(e) = reg.control().enable_stats_until(until) {
        tracing::debug!("run statistics stay off: {e}");
    }
}

/// The two content types served.
struct Types {
    metrics: tiny_http::Header,
    plain: tiny_http::Header,
}

impl Types {
    fn new() -> anyhow::Result<Self> {
        let h = |v: &str| {
            tiny_http::Header::from_bytes("Content-Type", v)
                .map_err(|()| anyhow::anyhow!("bad header value `{v}`"))
        };
        Ok(Self {
            metrics: h("application/openmetrics-text; version=1.0.0; charset=utf-8")?,
            plain: h("text/plain; charset=utf-8")?,
        })
    }
}

fn respond(req: tiny_http::Request, node: &mut Node, maps: &[MapChoice], types: &Types) {
    let path = req.url().split('?').next().unwrap_or("").to_string();
    let (body, code, ctype) = match (req.method(), path.as_str()) {
        (tiny_http::Method::Get, "/metrics") => {
            (render(node.registry(), maps), 200, &types.metrics)
        }
        (tiny_http::Method::Get, "/") => (
            "gpubpf exporter: metrics at /metrics\n".to_string(),
            200,
            &types.plain,
        ),
        (tiny_http::Method::Get, _) => ("not found\n".to_string(), 404, &types.plain),
        _ => ("only GET\n".to_string(), 405, &types.plain),
    };
    let resp = tiny_http::Response::from_string(body)
        .with_status_code(code)
        .with_header(ctype.clone());
    if let Err(e) = req.respond(resp) {
        tracing::debug!("cannot answer a scrape: {e}");
    }
}

pub fn run(args: Args, _out: &Output) -> anyhow::Result<()> {
    let server = tiny_http::Server::http(&args.listen)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    eprintln!(
        "gpubpf exporter: serving http://{}/metrics",
        server
            .server_addr()
            .to_ip()
            .map_or_else(|| args.listen.clone(), |a| a.to_string())
    );
    let types = Types::new()?;
    let mut node = Node { reg: None };
    loop {
        if args.stats {
            if let Some(reg) = node.registry() {
                renew_stats(reg);
            }
        }
        match server.recv_timeout(Duration::from_secs(1)) {
            Ok(Some(req)) => respond(req, &mut node, &args.maps, &types),
            Ok(None) => {}
            Err(e) => return Err(e).context("the HTTP server failed"),
        }
    }
}
