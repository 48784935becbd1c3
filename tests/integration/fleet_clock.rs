//! A viewer whose clock is off: the fleet's queries carry no `time` (the engine evaluates them at
//! its own now), so a gpudash whose clock runs ten minutes ahead or behind still lists every host
//! with live figures, stamped with the engine's time. (Sending the viewer's time, a clock more
//! than 5 minutes ahead gave an empty fleet: an instant query looks back 5 minutes from its time.)

use std::time::Duration;

use gpudash::clock::Clock;
use gpudash::fleet::FleetConfig;
use shared::fleet::FleetResponse;

use crate::fleet::{instance, quick_fleet_config, start_prometheus};
use crate::support::eventually_every;

const TEN_MINUTES_MS: i64 = 10 * 60 * 1000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_whose_clock_is_off_still_sees_the_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let node = instance("fleet-clock", 2, None).await;
    let target = node.running.addr().to_string();
    let (mut prometheus, prometheus_url) = start_prometheus(dir.path(), std::slice::from_ref(&target), 1).await;
    for (clock, off) in [(Clock::skewed(TEN_MINUTES_MS), "ahead"), (Clock::skewed(-TEN_MINUTES_MS), "behind")] {
        let config = FleetConfig { clock, ..quick_fleet_config(&prometheus_url) };
        let viewer = instance("viewer", 1, Some(config)).await;
        let api = viewer.url("/api/fleet");
        let what = format!("fleet-clock's 2 live GPUs, seen by a viewer 10 minutes {off}");
        let fleet = eventually_every(30, Duration::from_millis(250), &what, || async {
            let fleet: FleetResponse = reqwest::get(&api).await.unwrap().json().await.unwrap();
            let live = fleet.nodes.iter().any(|n| n.hostname == "fleet-clock" && n.gpus == 2 && !n.stale);
            if live && fleet.error.is_none() { Ok(fleet) } else { Err(fleet) }
        })
        .await;
        let skew = fleet.queried_ms.abs_diff(gpudash::clock::now_ms());
        assert!(skew < 60_000, "stamped with the engine's time, not the viewer's ({off}): {skew} ms off");
        assert!(fleet.gpus.iter().all(|g| !g.stale && g.memory_used.is_some()), "{:?}", fleet.gpus);

        // Opening the host reads its figures at the engine's now too.
        let host: FleetResponse =
            reqwest::get(viewer.url(&format!("/api/fleet/host/{target}"))).await.unwrap().json().await.unwrap();
        assert_eq!(host.error, None);
        assert_eq!(host.gpus.len(), 2, "{off}: {host:?}");
        assert!(host.gpus.iter().all(|g| !g.stale && g.gpu_util.is_some()), "{off}: {:?}", host.gpus);
        viewer.stop().await;
    }
    prometheus.stop();
    node.stop().await;
}
