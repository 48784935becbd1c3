//! `/metrics` as Prometheus and Grafana see it, checked by Prometheus's own `promtool`.

use std::io::Write as _;
use std::process::{Command, Stdio};

use crate::support::{TestServer, eventually};

pub fn promtool() -> String {
    let path = std::env::var("PROMTOOL").unwrap_or_else(|_| "/usr/bin/promtool".to_owned());
    assert!(
        std::path::Path::new(&path).exists(),
        "the metrics test needs promtool (Debian package `prometheus`; `bash tests/run.sh` installs it)"
    );
    path
}

#[tokio::test]
async fn metrics_pass_promtool_and_carry_dcgm_names() {
    let server = TestServer::simulated(2, 100).await;
    // Health and processes come from the slow loop: wait for its first round.
    // The GPM loop closes its first window after a second.
    eventually(10, "the slow loop's process series and the GPM loop's activity", || async {
        let text = reqwest::get(server.url("/metrics")).await.ok()?.text().await.ok()?;
        (text.contains("\ngpudash_process_memory_bytes{") && text.contains("\nDCGM_FI_PROF_SM_ACTIVE{")).then_some(())
    })
    .await;
    let response = reqwest::get(server.url("/metrics")).await.unwrap();
    assert_eq!(response.headers()["content-type"], "text/plain; version=0.0.4; charset=utf-8");
    let text = response.text().await.unwrap();
    for name in [
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_XID_ERRORS",
        "gpudash_pcie_tx_bytes_per_second",
        "gpudash_clock_event_active",
        "gpudash_process_memory_bytes",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
        "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
        "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
    ] {
        assert!(text.contains(&format!("\n{name}{{")) || text.starts_with(&format!("{name}{{")), "{name} missing");
    }
    let mut check = Command::new(promtool())
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = check.wait_with_output().unwrap();
    let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // A parse error exits 1; style lints exit 3. The only lints allowed are about
    // dcgm-exporter's own names (counters without `_total`, "COUNTER" in a name) and
    // its `modelName`/`Hostname` labels, which gpudash_* series carry too so they join
    // with DCGM series: kept on purpose so existing dashboards and alerts match.
    assert!(matches!(out.status.code(), Some(0 | 3)), "promtool failed: {report}");
    let problems: Vec<&str> = report
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| {
            let dcgm_name = l.starts_with("DCGM_FI_")
                && (l.ends_with("counter metrics should have \"_total\" suffix")
                    || l.ends_with("metric name should not include type 'counter'"));
            let dcgm_labels = l.ends_with("label names should be written in 'snake_case' not 'camelCase'");
            !(dcgm_name || dcgm_labels)
        })
        .collect();
    assert!(problems.is_empty(), "promtool: {problems:#?}");
    server.stop().await;
}
