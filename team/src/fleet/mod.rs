//! The fleet view: every GPU host a Prometheus server scrapes, read through
//! its HTTP API rather than a home-made cluster protocol.
//!
//! One refresh sends one PromQL query per metric for the whole fleet
//! ([`model::Query`]), concurrently, and joins the answers by (instance, gpu).
//! Answers are cached for a few seconds; one refresh runs at a time, and callers
//! wait for it asynchronously, never holding a runtime thread.

mod answer;
pub mod client;
pub mod down;
pub mod hosts;
pub mod kept;
pub mod model;
pub mod owners;
pub mod sweep;
mod usable;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base::clock::Clock;
use clap::Args;
use reqwest::Url;
use shared::fleet::{FleetFilter, FleetGpus, FleetListing, FleetResponse};

pub use client::{PrometheusAuth, PrometheusClient, PrometheusError, PrometheusUrlError, parse_prometheus_url};
use model::{Answers, FleetView, Query};
use sweep::Sweep;

/// How long a silent node's last figures stay on the page by default.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(600);
/// How long one answer is served from cache by default.
pub const DEFAULT_CACHE: Duration = Duration::from_secs(5);
/// How long one query may take.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// `--fleet-*` flags.
#[derive(Args, Debug, Clone)]
pub struct FleetArgs {
    /// Show a Fleet page of every GPU host this Prometheus scrapes (e.g. http://prometheus:9090 or https://…).
    #[arg(long, env = "GPUDASH_FLEET_PROMETHEUS", value_name = "URL", value_parser = parse_prometheus_url)]
    pub fleet_prometheus: Option<Url>,

    /// Bearer token for that Prometheus.
    #[arg(
        long,
        env = "GPUDASH_FLEET_PROMETHEUS_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true,
        requires = "fleet_prometheus",
        conflicts_with = "fleet_prometheus_user"
    )]
    pub fleet_prometheus_token: Option<String>,

    /// Basic-auth user for that Prometheus; the password comes from GPUDASH_FLEET_PROMETHEUS_PASSWORD.
    #[arg(
        long,
        env = "GPUDASH_FLEET_PROMETHEUS_USER",
        value_name = "USER",
        requires = "fleet_prometheus",
        requires = "fleet_prometheus_password"
    )]
    pub fleet_prometheus_user: Option<String>,

    /// Basic-auth password (prefer the environment variable: flags show in `ps`).
    #[arg(long, env = "GPUDASH_FLEET_PROMETHEUS_PASSWORD", hide_env_values = true, hide = true)]
    pub fleet_prometheus_password: Option<String>,

    /// PEM certificate(s) of the CA that signed an https Prometheus's certificate, trusted besides the
    /// system's CAs (for a private CA).
    #[arg(long, env = "GPUDASH_FLEET_PROMETHEUS_CA", value_name = "FILE", requires = "fleet_prometheus")]
    pub fleet_prometheus_ca: Option<std::path::PathBuf>,

    /// How long a node that stopped answering keeps its last figures on the Fleet page (1m to 24h).
    #[arg(long, env = "GPUDASH_FLEET_WINDOW", default_value = "10m", value_parser = parse_window)]
    pub fleet_window: Duration,
}

/// Where the fleet's figures come from, validated.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    pub prometheus: Url,
    pub auth: PrometheusAuth,
    /// Extra CA certificates (PEM file) to trust for an https Prometheus.
    pub ca_file: Option<std::path::PathBuf>,
    /// The `last_over_time` window: how long a silent node stays listed (as stale).
    pub window: Duration,
    /// How long one answer is served before asking again.
    pub cache: Duration,
    /// How long one query may take.
    pub timeout: Duration,
    /// This viewer's clock: how old the cached answer and the kept labels are, and (its wall
    /// time) the stamp of an answer that carried no time (nothing to show). Queries never send
    /// it: the engine evaluates them at its own now, and answers are stamped with the engine's
    /// time; a test skews it to prove that.
    pub clock: Clock,
}

impl FleetConfig {
    /// Defaults for everything but the URL: no auth, a 10-minute window, 5 s cache and timeout.
    pub fn new(prometheus: Url) -> Self {
        Self {
            prometheus,
            auth: PrometheusAuth::None,
            ca_file: None,
            window: DEFAULT_WINDOW,
            cache: DEFAULT_CACHE,
            timeout: DEFAULT_TIMEOUT,
            clock: Clock::system(),
        }
    }

    /// The configuration the flags ask for; `None` without `--fleet-prometheus`.
    pub fn from_args(args: &FleetArgs) -> Option<Self> {
        let auth = match (&args.fleet_prometheus_token, &args.fleet_prometheus_user) {
            (Some(token), _) => PrometheusAuth::Bearer(token.clone()),
            (None, Some(user)) => PrometheusAuth::Basic {
                user: user.clone(),
                password: args.fleet_prometheus_password.clone().unwrap_or_default(),
            },
            (None, None) => PrometheusAuth::None,
        };
        let url = args.fleet_prometheus.clone()?;
        Some(Self { auth, window: args.fleet_window, ca_file: args.fleet_prometheus_ca.clone(), ..Self::new(url) })
    }
}

fn parse_window(value: &str) -> Result<Duration, crate::flags::ConfigError> {
    crate::flags::parse_duration_within(
        value,
        Duration::from_secs(60)..=Duration::from_secs(86_400),
        "10m or 1h",
        "the fleet window must be between 1m and 24h",
    )
}

/// A GPU's temperature and power, as a listing reads them.
type Gauges = (Option<f64>, Option<f64>);

/// The fleet, as a Prometheus server sees it, with a short cache.
#[derive(Debug)]
pub struct Fleet {
    client: PrometheusClient,
    config: FleetConfig,
    cached: Mutex<Option<(Instant, Arc<FleetResponse>)>>,
    /// Held while a refresh runs, so concurrent callers share one instead of each asking Prometheus.
    refresh: tokio::sync::Mutex<()>,
    /// The GPUs' memory totals and labels, with when they were read ([`kept`]).
    kept: Mutex<Option<Arc<kept::Kept>>>,
}

impl Fleet {
    pub fn new(config: FleetConfig) -> Result<Self, PrometheusError> {
        let client =
            PrometheusClient::new(&config.prometheus, config.auth.clone(), config.ca_file.as_deref(), config.timeout)?;
        Ok(Self {
            client,
            config,
            cached: Mutex::new(None),
            refresh: tokio::sync::Mutex::new(()),
            kept: Mutex::new(None),
        })
    }

    pub fn config(&self) -> &FleetConfig {
        &self.config
    }

    /// The fleet now: from cache when younger than the cache period, else freshly queried.
    pub async fn snapshot(&self) -> Arc<FleetResponse> {
        if let Some(fresh) = self.fresh() {
            return fresh;
        }
        let _refreshing = self.refresh.lock().await;
        // Someone else may have refreshed while this caller waited.
        if let Some(fresh) = self.fresh() {
            return fresh;
        }
        let answer = Arc::new(self.query().await);
        *base::sync::lock(&self.cached) = Some((self.config.clock.now(), answer.clone()));
        answer
    }

    fn fresh(&self) -> Option<Arc<FleetResponse>> {
        let cached = base::sync::lock(&self.cached);
        let now = self.config.clock.now();
        cached.as_ref().filter(|(at, _)| now.duration_since(*at) < self.config.cache).map(|(_, answer)| answer.clone())
    }

    /// The whole fleet at one instant: the first round's instant queries concurrently, then the
    /// windowed queries for silent targets only ([`sweep`]), joined. The first round sends no
    /// time (the engine evaluates at its own now: a viewer whose clock is off still sees the
    /// fleet); the second asks at the instant the engine said the first was evaluated at.
    pub async fn query(&self) -> FleetResponse {
        let started = self.config.clock.now();
        let window = self.config.window;
        let old = base::sync::lock(&self.kept).clone();
        let due = kept::due(old.as_deref(), started);
        let ask = |sweeps: Vec<Sweep>| {
            futures_util::future::join_all(sweeps.into_iter().map(|s| {
                let promql = s.promql(window);
                async move { (s, self.client.query_at(&promql, None).await) }
            }))
        };
        let results = ask(Sweep::ALL.into_iter().filter(|s| !s.kept() || due.contains(s)).collect()).await;
        let mut first = Vec::new();
        let mut error = None;
        let mut warnings = std::collections::BTreeSet::new();
        let mut at_s = None;
        let mut take = |results: Vec<(Sweep, Result<client::Answered, PrometheusError>)>, first: &mut kept::Round| {
            for (sweep, result) in results {
                match result {
                    Ok(answered) => {
                        at_s = at_s.max(answered.at_s.map(|t| (t * 1000.0) as u64));
                        first.push((sweep, answered.series));
                        warnings.extend(answered.warnings);
                    }
                    Err(e) => drop(error.get_or_insert(e)),
                }
            }
        };
        take(results, &mut first);
        // What this round read of the kept answers, in place of the old.
        let mut fresh = (!due.is_empty()).then(|| kept::Kept::updated(old.as_deref(), &first, self.config.clock.now()));
        // A GPU the kept answers do not know (new since they were read, or another card in its
        // slot): ask what this round did not, now.
        if fresh.as_ref().or(old.as_deref()).is_some_and(|k| !k.covers(&first)) {
            take(ask(Sweep::ALL.into_iter().filter(|s| s.kept() && !due.contains(s)).collect()).await, &mut first);
            fresh = Some(kept::Kept::updated(old.as_deref(), &first, self.config.clock.now()));
        }
        let mut answers = Answers::new();
        let mut down = Vec::new();
        if error.is_none() {
            let kept = match fresh {
                Some(fresh) => {
                    let fresh = Arc::new(fresh);
                    *base::sync::lock(&self.kept) = Some(fresh.clone());
                    Some(fresh)
                }
                None => old,
            };
            kept::dress(&mut first, kept.as_deref());
            let (mut found, silent) = sweep::into_answers(first);
            // The targets API lists every target (a large answer at 1,000 hosts): asked only when
            // one is down, for its scrape error, beside the second round.
            let any_down = found.get(&Query::Up).is_some_and(|up| up.iter().any(|s| s.value < 1.0));
            let errors = async { if any_down { self.down().await } else { Vec::new() } };
            let more = async {
                if silent.is_empty() {
                    return Ok((Answers::new(), None));
                }
                let matcher = sweep::matcher(&silent).unwrap_or_default();
                let queries = Query::ALL.into_iter().filter(|q| sweep::second_round(*q));
                self.ask(queries, &matcher, at_s.map(|ms| ms as f64 / 1000.0)).await
            };
            let (more, errors) = futures_util::future::join(more, errors).await;
            match more {
                Ok((more, _)) => more.into_iter().for_each(|(q, s)| found.entry(q).or_default().extend(s)),
                Err(e) => error = Some(e),
            }
            down = errors;
            answers = found;
        }
        let now_ms = at_s.unwrap_or_else(|| self.config.clock.now_ms());
        let mut response = self.respond(started, now_ms, &answers, &down, error);
        if !warnings.is_empty() {
            tracing::warn!("fleet: a partial answer: {warnings:?}");
        }
        response.warnings = warnings.into_iter().take(10).collect();
        response
    }

    /// One host's GPUs with every figure (`GET /api/fleet/host/{instance}`): the windowed queries,
    /// restricted to that target, at the engine's now. `None` when the engine knows no such target
    /// in the window.
    pub async fn host(&self, instance: &str) -> Option<FleetResponse> {
        let started = self.config.clock.now();
        let matcher = sweep::instance_matcher(instance);
        let (answers, down) =
            futures_util::future::join(self.ask(Query::ALL.into_iter(), &matcher, None), self.down()).await;
        let response = match answers {
            Ok((answers, at_ms)) => {
                self.respond(started, at_ms.unwrap_or_else(|| self.config.clock.now_ms()), &answers, &down, None)
            }
            Err(e) => self.respond(started, self.config.clock.now_ms(), &Answers::new(), &down, Some(e)),
        };
        (response.error.is_some() || response.nodes.iter().any(|n| n.instance == instance)).then_some(response)
    }

    /// `queries` over the targets `matcher` selects, concurrently, at `time_s` (or the engine's
    /// now); with the engine's time of evaluation, ms, when any answer carried one.
    async fn ask(
        &self,
        queries: impl Iterator<Item = Query>,
        matcher: &str,
        time_s: Option<f64>,
    ) -> Result<(Answers, Option<u64>), PrometheusError> {
        let window = self.config.window;
        let asked = queries.map(|q| {
            let promql = q.promql_for(window, matcher);
            async move { (q, self.client.query_at(&promql, time_s).await) }
        });
        let mut answers = Answers::new();
        let mut at_ms = None;
        for (query, result) in futures_util::future::join_all(asked).await {
            let answered = result?;
            at_ms = at_ms.max(answered.at_s.filter(|t| t.is_finite()).map(|t| (t * 1000.0) as u64));
            answers.insert(query, answered.series.into_iter().map(|(_, s)| s).collect());
        }
        Ok((answers, at_ms))
    }

    /// Fills in the temperature and power of the live GPUs `listing` shows, read now for their
    /// targets alone, one query (the refresh leaves them out: [`sweep`]). A failure leaves them
    /// unknown, as the page shows any missing figure.
    pub async fn with_gauges(&self, listing: &mut FleetResponse) {
        let wanted = |g: &shared::fleet::FleetGpu| !g.stale && g.temperature_c.is_none() && g.power_w.is_none();
        let instances: std::collections::BTreeSet<String> =
            listing.gpus.iter().filter(|g| wanted(g)).map(|g| g.instance.clone()).collect();
        if instances.is_empty() {
            return;
        }
        let promql = sweep::gauges(&sweep::matcher(&instances).unwrap_or_default());
        let series = match self.client.query_at(&promql, None).await {
            Ok(answered) => answered.series,
            Err(e) => return tracing::debug!("fleet: no temperature or power for the listing: {e}"),
        };
        let mut figures: std::collections::HashMap<(&str, &str), Gauges> = std::collections::HashMap::new();
        for (name, s) in &series {
            let (Some(instance), Some(gpu)) = (s.label("instance"), s.label("gpu")) else { continue };
            let entry = figures.entry((instance, gpu)).or_default();
            match name.as_str() {
                "DCGM_FI_DEV_GPU_TEMP" => entry.0 = Some(s.value),
                "DCGM_FI_DEV_POWER_USAGE" => entry.1 = Some(s.value),
                _ => {}
            }
        }
        for gpu in listing.gpus.iter_mut().filter(|g| wanted(g)) {
            if let Some((temperature, power)) = figures.get(&(gpu.instance.as_str(), gpu.gpu.to_string().as_str())) {
                (gpu.temperature_c, gpu.power_w) = (*temperature, *power);
            }
        }
    }

    /// The targets that are down, for their scrape errors' words: a server without the targets
    /// API still has a fleet.
    async fn down(&self) -> Vec<client::DownTarget> {
        self.client.down_targets().await.unwrap_or_else(|e| {
            tracing::debug!("fleet: no scrape errors to show: {e}");
            Vec::new()
        })
    }

    fn respond(
        &self,
        started: Instant,
        now_ms: u64,
        answers: &Answers,
        down: &[client::DownTarget],
        error: Option<PrometheusError>,
    ) -> FleetResponse {
        let mut response = FleetResponse {
            prometheus: self.client.base().to_string(),
            queried_ms: now_ms,
            query_ms: u64::try_from(self.config.clock.now().duration_since(started).as_millis()).unwrap_or(u64::MAX),
            window_ms: u64::try_from(self.config.window.as_millis()).unwrap_or(u64::MAX),
            ..FleetResponse::default()
        };
        if let Some(e) = error {
            tracing::warn!("fleet: {e}");
            response.error = Some(e.to_string());
            return response;
        }
        let mut view = model::join(answers);
        down::add_down_targets(&mut view, answers, down);
        let FleetView { mut nodes, gpus, mut summary, choices } = view;
        hosts::tally(&mut nodes, &gpus, &mut summary);
        response.nodes = nodes;
        response.gpus = gpus;
        response.summary = summary;
        response.choices = choices;
        response
    }
}

/// `response` with only the GPUs `filter` passes, the nodes that have one, and the down nodes
/// without GPU figures that its host filter passes.
pub fn filtered(response: &FleetResponse, filter: &FleetFilter, listing: FleetListing) -> FleetResponse {
    if filter.is_empty() {
        return match listing.gpus {
            FleetGpus::All => response.clone(),
            FleetGpus::None => FleetResponse {
                prometheus: response.prometheus.clone(),
                error: response.error.clone(),
                nodes: response.nodes.clone(),
                gpus: Vec::new(),
                choices: response.choices.clone(),
                queried_ms: response.queried_ms,
                query_ms: response.query_ms,
                window_ms: response.window_ms,
                summary: response.summary,
                warnings: response.warnings.clone(),
            },
        };
    }
    let gpus: Vec<_> = response.gpus.iter().filter(|g| filter.matches(g)).cloned().collect();
    let nodes = response
        .nodes
        .iter()
        .filter(|n| gpus.iter().any(|g| g.instance == n.instance) || (n.gpus == 0 && filter.matches_node(n)))
        .cloned()
        .collect();
    FleetResponse { gpus, nodes, ..response.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_query_is_one_promql_expression_over_the_whole_fleet() {
        let window = Duration::from_secs(600);
        assert_eq!(Query::GpuUtil.promql(window), "last_over_time(DCGM_FI_DEV_GPU_UTIL[600s])");
        assert_eq!(Query::LastSeen.promql(window), "max_over_time(timestamp(up == 1)[600s:1s])");
        assert_eq!(Query::Present.promql(window), "timestamp(DCGM_FI_DEV_FB_USED)");
        let all: std::collections::HashSet<String> = Query::ALL.iter().map(|q| q.promql(window)).collect();
        assert_eq!(all.len(), Query::ALL.len());
        assert!(all.iter().all(|q| !q.contains("instance=")), "no per-node queries");
    }

    #[test]
    fn windows_are_bounded() {
        assert_eq!(parse_window("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(
            parse_window("10s").unwrap_err().to_string(),
            "'10s' is out of range; the fleet window must be between 1m and 24h"
        );
        assert!(parse_window("soon").unwrap_err().to_string().contains("not a duration"));
    }
}
