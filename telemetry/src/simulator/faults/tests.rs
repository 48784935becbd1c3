//! Each fault parses, and the simulator shows its signal while it holds and not outside it.

use crate::GpuSource;
use crate::simulator::{Fault, ScriptedJob, Simulator, Window};
use shared::DeviceSample;

/// When the first sample is taken.
const T0: u64 = 1_000_000;

fn sim(count: u32, faults: &[&str]) -> Simulator {
    faults.iter().fold(Simulator::new(count, 1000), |sim, fault| sim.with_fault(fault.parse().unwrap()))
}

/// GPU `index`'s reading at each second `from..to` after the first sample (which must have been taken).
fn seconds(sim: &Simulator, index: usize, range: std::ops::Range<u64>) -> Vec<DeviceSample> {
    range.map(|s| sim.sample(T0 + s * 1000).swap_remove(index)).collect()
}

fn events(sample: &DeviceSample) -> Vec<String> {
    sample.clock_events.clone().unwrap_or_default()
}

#[test]
fn every_fault_parses() {
    let window = |start_ms, length_ms| Window { start_ms, length_ms };
    for (text, fault) in [
        ("lost:3@1m", Fault::Lost { device: 3, window: window(60_000, None) }),
        ("lost:3@1s+2s", Fault::Lost { device: 3, window: window(1_000, Some(2_000)) }),
        ("wrong-result:2", Fault::WrongResult { device: 2 }),
        ("hot:0@5s+30s", Fault::Hot { device: 0, window: window(5_000, Some(30_000)) }),
        ("power-brake:1@0s", Fault::PowerBrake { device: 1, window: window(0, None) }),
        ("power-cap:2@1s+5s", Fault::PowerCap { device: 2, window: window(1_000, Some(5_000)) }),
        ("warm:3@0s", Fault::Warm { device: 3, window: window(0, None) }),
        ("xid:1:48@10s", Fault::Xid { device: 1, code: 48, at_ms: 10_000 }),
        ("ecc:0@2s+1m", Fault::Ecc { device: 0, window: window(2_000, Some(60_000)) }),
        ("memory-full:7@500ms+5s", Fault::MemoryFull { device: 7, window: window(500, Some(5_000)) }),
        ("job-ends:1@3s", Fault::JobEnds { device: 1, window: window(3_000, None) }),
        ("job-ends:1@3s+4s", Fault::JobEnds { device: 1, window: window(3_000, Some(4_000)) }),
        (" idle-holder:2@1s ", Fault::IdleHolder { device: 2, window: window(1_000, None) }),
        ("unseen:1@2s+1m", Fault::Unseen { device: 1, window: window(2_000, Some(60_000)) }),
        ("pid:1:4242", Fault::HostProcess { device: 1, pid: 4242 }),
        (
            "job:1:ana:4:75@1s+3s",
            Fault::Job {
                device: 1,
                job: ScriptedJob { user: "ana".into(), workload: None, gib: 4, sm_util: Some(75), spin: false },
                window: window(1_000, Some(3_000)),
            },
        ),
        (
            "job:0:bo.b:2@0s+1m",
            Fault::Job {
                device: 0,
                job: ScriptedJob { user: "bo.b".into(), workload: None, gib: 2, sm_util: None, spin: false },
                window: window(0, Some(60_000)),
            },
        ),
    ] {
        assert_eq!(text.parse::<Fault>().as_ref(), Ok(&fault), "{text}");
        assert_eq!(fault.device(), text.trim().split([':', '@']).nth(1).unwrap().parse::<u32>().unwrap());
    }
}

#[test]
fn scripted_jobs_run_in_containers_pods_and_slurm_jobs() {
    let parse = |text: &str| match text.parse::<Fault>() {
        Ok(Fault::Job { job, .. }) => job,
        other => panic!("{text}: {other:?}"),
    };
    let slurm = parse("job:0:ana@slurm:4242:4:50@2s+10s");
    let job = slurm.workload.as_ref().and_then(|w| w.job.as_ref()).unwrap();
    assert_eq!((job.id.as_str(), job.user.as_deref(), slurm.unix_user(), slurm.gib), ("4242", Some("ana"), "ana", 4));
    let container = parse("job:1:bo@container:trainer:2@0s+1m");
    let c = container.workload.as_ref().and_then(|w| w.container.as_ref()).unwrap();
    assert_eq!(
        (c.name.as_deref(), c.label("gpudash.user"), container.unix_user()),
        (Some("trainer"), Some("bo"), "root")
    );
    let pod = parse("job:2:cy@pod:ml/bert-0:1:90@0s+1m");
    let p = pod.workload.as_ref().and_then(|w| w.pod.as_ref()).unwrap();
    assert_eq!((p.namespace.as_deref(), p.name.as_deref(), pod.sm_util), (Some("ml"), Some("bert-0"), Some(90)));
    for bad in [
        "job:0:ana@slurm:12x:4@0s+1s",
        "job:0:ana@vm:x:4@0s+1s",
        "job:0:ana@pod:nonamespace:4@0s+1s",
        "job:0:ana@container:<b>:4@0s+1s",
        "job:0:ana@container::4@0s+1s",
    ] {
        assert!(bad.parse::<Fault>().is_err(), "{bad}");
    }
}

#[test]
fn a_bad_fault_says_the_syntax_of_every_kind() {
    for bad in [
        "lost",
        "lost:x@1s",
        "lost:1@soon",
        "lost:1@1s+",
        "lost:1@1s+ever",
        "melt:1@1s",
        "wrong-result:",
        "wrong-result:-1",
        "wrong:1",
        "hot:1",
        "hot:1@",
        "xid:1@5s",
        "pid:1",
        "pid:1:0",
        "pid:1:x",
        "pid:1:5@1s",
        "xid:1:x@5s",
        "xid:1:13@5s+1s",
        "ecc:-1@1s",
        "memory-full:1:2@1s",
        "power-cap:1",
        "power-cap:x@1s",
        "warm:1@1s+",
        "job-ends@1s",
        "idle-holder:a@1s",
        "job:0:ana:4@1s",
        "job:0:ana:4:101@1s+1s",
        "job:0::4@1s+1s",
        "job:0:a b:4@1s+1s",
        "job:0:ana:x@1s+1s",
        "job:0:ana:4:50:1@1s+1s",
        "job:0:ana:4:spin@1s+1s",
        "job:0:ana:4:50:spin:x@1s+1s",
        "",
    ] {
        let message = bad.parse::<Fault>().unwrap_err().to_string();
        for syntax in [
            "lost:INDEX@DELAY[+LENGTH]",
            "wrong-result:INDEX",
            "hot:INDEX@START[+LENGTH]",
            "power-brake:INDEX@START[+LENGTH]",
            "power-cap:INDEX@START[+LENGTH]",
            "warm:INDEX@START[+LENGTH]",
            "xid:INDEX:CODE@START",
            "ecc:INDEX@START[+LENGTH]",
            "memory-full:INDEX@START[+LENGTH]",
            "job:INDEX:USER:GIB[:SM[:spin]]@START+LENGTH",
            "job-ends:INDEX@START[+LENGTH]",
            "idle-holder:INDEX@START[+LENGTH]",
        ] {
            assert!(message.contains(syntax), "{bad}: {syntax} missing from {message}");
        }
    }
}

#[test]
fn a_lost_gpu_comes_back_reset_after_its_length() {
    let sim = sim(2, &["lost:0@3s+4s"]);
    let gpu0 = seconds(&sim, 0, 0..12);
    let lost: Vec<bool> = gpu0.iter().map(|s| s.lost.is_some()).collect();
    assert_eq!(lost, [false, false, false, true, true, true, true, false, false, false, false, false]);
    assert!(gpu0[7].memory_used.is_some() && gpu0[7].gpu_util.is_some(), "{:?}", gpu0[7]);
    let xids = std::mem::take(&mut *sim.xids.lock().unwrap());
    assert_eq!(xids.iter().map(|x| (x.device, x.code, x.timestamp_ms)).collect::<Vec<_>>(), [(0, 79, T0 + 3_000)]);
    // The reset killed the job: back, it runs nothing until a new job starts.
    assert!(sim.details(T0 + 11_000).processes.iter().all(|p| p.device != 0));
    assert_eq!(sim.activity(T0 + 11_000).len(), 2, "it has GPM windows again");
}

#[test]
fn a_hot_gpu_ramps_past_the_threshold_slows_down_and_cools_back() {
    let sim = sim(2, &["hot:1@5s+15s"]);
    let gpu1 = seconds(&sim, 1, 0..30);
    let temperature = |s: &DeviceSample| s.temperature_c.unwrap();
    assert!(gpu1[..5].iter().all(|s| temperature(s) < 45 && events(s) == ["idle"]), "{:?}", &gpu1[..5]);
    for pair in gpu1.windows(2) {
        assert!(temperature(&pair[1]).abs_diff(temperature(&pair[0])) <= 12, "a ramp, not a jump: {pair:?}");
    }
    assert!(gpu1[10..20].iter().all(|s| temperature(s) >= 90), "{:?}", &gpu1[10..20]);
    for s in &gpu1 {
        let slowed = events(s).contains(&"sw_thermal_slowdown".to_owned());
        assert_eq!(slowed, temperature(s) >= 87, "{s:?}");
    }
    assert!(gpu1[24..].iter().all(|s| temperature(s) <= 80 && !events(s).contains(&"sw_thermal_slowdown".to_owned())));
}

#[test]
fn a_power_brake_slows_the_clock_while_it_holds() {
    let sim = sim(1, &["power-brake:0@5s+5s"]);
    let gpu0 = seconds(&sim, 0, 0..15);
    let braked = |s: &DeviceSample| events(s).contains(&"hw_power_brake_slowdown".to_owned());
    assert_eq!(gpu0.iter().map(braked).collect::<Vec<_>>(), [[false; 5], [true; 5], [false; 5]].concat());
    assert!(gpu0[4].sm_clock_mhz.unwrap() > 1800 && gpu0[6].sm_clock_mhz.unwrap() <= 660, "{gpu0:?}");
    assert!(gpu0[6].power_draw_mw < gpu0[4].power_draw_mw, "{gpu0:?}");
    assert!(gpu0[12].sm_clock_mhz.unwrap() > 1800, "{:?}", gpu0[12]);
}

#[test]
fn a_power_cap_holds_the_draw_at_the_limit_while_it_holds() {
    // The cap shows whatever the GPU runs, and only while it holds.
    let sim = sim(1, &["power-cap:0@5s+5s"]);
    let gpu0 = seconds(&sim, 0, 0..15);
    let capped = |s: &DeviceSample| events(s).contains(&"sw_power_cap".to_owned());
    assert_eq!(gpu0[..5].iter().map(capped).collect::<Vec<_>>(), [false; 5], "{:?}", &gpu0[..5]);
    assert_eq!(gpu0[5..10].iter().map(capped).collect::<Vec<_>>(), [true; 5], "{:?}", &gpu0[5..10]);
    for s in &gpu0[5..10] {
        let (draw, limit) = (s.power_draw_mw.unwrap(), s.power_limit_mw.unwrap());
        assert!(draw <= limit && draw >= limit / 100 * 99, "at the limit: {s:?}");
    }
    // After it, the draw follows the load again: never pinned at the limit.
    assert!(
        gpu0[10..].iter().all(|s| s.power_draw_mw.unwrap() < s.power_limit_mw.unwrap() / 100 * 97),
        "{:?}",
        &gpu0[10..]
    );
}

#[test]
fn a_warm_gpu_settles_near_its_slowdown_threshold_without_slowing_down() {
    let warm = sim(2, &["warm:1@2s"]);
    let slowdown = warm.devices()[1].slowdown_temp_c.unwrap();
    assert_eq!((slowdown, warm.devices()[1].shutdown_temp_c), (87, Some(95)));
    let gpu1 = seconds(&warm, 1, 0..20);
    for s in &gpu1[10..] {
        let t = s.temperature_c.unwrap();
        assert!((slowdown - 5..slowdown).contains(&t), "near, not past, the threshold: {s:?}");
        assert!(!events(s).contains(&"sw_thermal_slowdown".to_owned()), "{s:?}");
    }
    // A hot fault on top of it wins, and the GPU slows down.
    let both = sim(1, &["warm:0@0s", "hot:0@5s"]);
    let hot = seconds(&both, 0, 0..15);
    assert!(hot[12..].iter().all(|s| s.temperature_c.unwrap() >= slowdown), "{:?}", &hot[12..]);
}

#[test]
fn an_injected_xid_is_raised_once_at_its_moment_with_its_meaning() {
    let sim = sim(2, &["xid:1:48@3s"]);
    seconds(&sim, 1, 0..3);
    assert!(sim.xids.lock().unwrap().is_empty(), "not before its moment");
    seconds(&sim, 1, 3..10);
    let xids = std::mem::take(&mut *sim.xids.lock().unwrap());
    assert_eq!(xids.len(), 1, "{xids:?}");
    assert_eq!((xids[0].device, xids[0].code, xids[0].timestamp_ms), (1, 48, T0 + 3_000));
    assert_eq!(xids[0].meaning, shared::health::xid_meaning(48));
}

#[test]
fn an_ecc_error_shows_until_the_reset() {
    let sim = sim(2, &["ecc:1@2s+3s"]);
    let ecc = |s: u64| {
        sim.sample(T0 + s * 1000);
        let health = sim.details(T0 + s * 1000).health.swap_remove(1);
        (health.ecc_volatile.uncorrected.unwrap(), health.remapped_rows.pending.unwrap())
    };
    assert_eq!(ecc(0), (0, false));
    assert_eq!(ecc(1), (0, false));
    assert!(ecc(2).0 > 0 && ecc(2).1 && ecc(4).0 > 0 && ecc(4).1);
    assert_eq!(ecc(5), (0, false));
    assert_eq!(sim.details(T0 + 9_000).health[0].ecc_volatile.uncorrected, Some(0), "GPU 0 is fine");
}

#[test]
fn memory_fills_while_memory_full_holds() {
    let sim = sim(2, &["memory-full:1@5s+10s"]);
    let total = sim.devices()[1].memory_total;
    let gpu1 = seconds(&sim, 1, 0..25);
    let share = |s: &DeviceSample| s.memory_used.unwrap() as f64 / total as f64;
    assert!(gpu1.iter().all(|s| s.memory_used.unwrap() + s.memory_free.unwrap() == total));
    assert!(gpu1[..5].iter().all(|s| share(s) < 0.05), "GPU 1 starts idle");
    assert!(gpu1[7..15].iter().all(|s| share(s) >= 0.97), "{:?}", &gpu1[7..15]);
    assert!(gpu1[18..].iter().all(|s| share(s) < 0.9), "released: {:?}", &gpu1[18..]);
}

#[test]
fn a_job_runs_until_job_ends_then_the_gpu_is_free_until_its_length() {
    // GPU 1 starts idle by itself: the fault gives it a busy job until then.
    let sim = sim(2, &["job-ends:1@6s+10s"]);
    let processes = |s: u64| {
        let sample = sim.sample(T0 + s * 1000).swap_remove(1);
        let details = sim.details(T0 + s * 1000);
        (sample, details.processes.into_iter().filter(|p| p.device == 1).collect::<Vec<_>>())
    };
    for s in 0..6 {
        let (sample, procs) = processes(s);
        assert_eq!(procs.len(), 1, "second {s}: {procs:?}");
        assert!(procs[0].user.is_some() && !procs[0].command.as_deref().unwrap().contains("ipykernel"));
        assert!(s < 3 || (procs[0].sm_util.unwrap() > 30 && sample.gpu_util.unwrap() > 30), "busy: {sample:?}");
    }
    for s in 6..16 {
        assert_eq!(processes(s).1, [], "second {s}: free");
    }
    assert_eq!(processes(16).1.len(), 1, "a new job after the length");
}

#[test]
fn a_job_that_ends_for_good_leaves_the_gpu_free() {
    let sim = sim(1, &["job-ends:0@2s"]);
    seconds(&sim, 0, 0..2);
    assert_eq!(sim.details(T0 + 1_000).processes.len(), 1);
    let gpu0 = seconds(&sim, 0, 2..400);
    assert!(sim.details(T0 + 399_000).processes.is_empty());
    assert!(gpu0[10..].iter().all(|s| s.gpu_util == Some(0)));
}

#[test]
fn an_idle_holder_holds_memory_and_computes_nothing_while_it_holds() {
    // GPU 0 runs a job from the start; the notebook replaces it at 5 s and exits at 20 s.
    let sim = sim(2, &["idle-holder:0@5s+15s"]);
    let on_gpu0 = |s: u64| {
        sim.sample(T0 + s * 1000);
        sim.details(T0 + s * 1000).processes.into_iter().filter(|p| p.device == 0).collect::<Vec<_>>()
    };
    seconds(&sim, 0, 0..4);
    let job = on_gpu0(4);
    assert!(job.len() == 1 && job[0].sm_util.is_some(), "{job:?}");
    let first = on_gpu0(5);
    assert!(first.len() == 1 && first[0].command.as_deref().unwrap().contains("ipykernel"), "{first:?}");
    assert_eq!(first[0].started_ms, Some(T0 + 5_000));
    let user = first[0].user.as_deref().unwrap();
    assert!(first[0].command.as_deref().unwrap().contains(&format!("/home/{user}/")), "{first:?}");
    for s in 10..20 {
        let holder = on_gpu0(s);
        assert_eq!(holder.len(), 1, "{holder:?}");
        assert_eq!((holder[0].pid, holder[0].sm_util), (first[0].pid, None));
        assert!(holder[0].used_memory.unwrap() > 5 << 30, "{holder:?}");
        let sm = sim.activity(T0 + s * 1000)[0].1.sm_active.unwrap();
        assert!(sm < shared::activity::IDLE_SM_PERCENT, "SM {sm} %: the GPU computes nothing");
    }
    assert!(on_gpu0(20).iter().all(|p| p.pid != first[0].pid), "the notebook exits after its length");
}

#[test]
fn a_host_process_is_listed_with_what_proc_says_until_it_exits() {
    let mut child = std::process::Command::new("sleep").arg("600").spawn().expect("spawn sleep");
    let pid = child.id();
    // `spawn` returns once the child exists, not once its exec is done: until then /proc holds no
    // command line (CI once read None here). Wait for it, with a deadline.
    let deadline = base::clock::Deadline::after(std::time::Duration::from_secs(5));
    while std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default() != b"sleep\x00600\x00" {
        assert!(!deadline.passed(), "sleep did not exec within 5 s");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let sim = sim(2, &[&format!("pid:1:{pid}")]);
    sim.sample(T0);
    let listed = sim.details(T0).processes.into_iter().find(|p| p.pid == pid).expect("the sleep is listed");
    assert_eq!(listed.device, 1);
    assert_eq!(listed.name.as_deref(), Some("sleep"));
    assert_eq!(listed.command.as_deref(), Some("sleep 600"));
    assert!(listed.user.is_some() && listed.started_ms.is_some(), "{listed:?}");
    child.kill().expect("kill sleep");
    child.wait().expect("reap sleep");
    assert!(sim.details(T0 + 1000).processes.iter().all(|p| p.pid != pid), "gone once it exited");
}

#[test]
fn a_scripted_job_runs_exactly_its_window_and_nothing_else_runs_there() {
    let sim = Simulator::new(2, 100).with_fault("job:0:ana:4:60@1s+2s".parse().unwrap());
    assert_eq!(sim.details_period(std::time::Duration::from_millis(100)), std::time::Duration::from_millis(100));
    let at = |ms: u64| sim.details(ms).processes.into_iter().filter(|p| p.device == 0).collect::<Vec<_>>();
    for ms in (0..6_000).step_by(500) {
        sim.sample(10_000 + ms);
    }
    assert!(at(10_999).is_empty(), "before its window (GPU 0 would run a random job otherwise)");
    let running = at(11_000);
    assert_eq!(running.len(), 1);
    let job = &running[0];
    assert_eq!(
        (job.user.as_deref(), job.used_memory, job.sm_util, job.started_ms),
        (Some("ana"), Some(4 << 30), Some(60), Some(11_000))
    );
    assert_eq!(at(12_999).len(), 1);
    assert!(at(13_000).is_empty(), "after its window");
    assert_eq!(
        Simulator::new(1, 100).details_period(std::time::Duration::from_millis(100)),
        std::time::Duration::from_secs(2)
    );
}

#[test]
fn a_scripted_jobs_gpu_reads_its_memory_and_sm_share() {
    let sim = Simulator::new(1, 100).with_fault("job:0:ana:40:85@1s+2s".parse().unwrap());
    let reading = |ms: u64| sim.sample(ms).remove(0);
    let before = reading(10_000);
    let during = reading(11_500);
    let after = reading(13_500);
    let gib = |s: &DeviceSample| s.memory_used.unwrap() as f64 / (1u64 << 30) as f64;
    assert!(gib(&before) < 1.0 && before.gpu_util == Some(0), "idle before: {before:?}");
    assert!((gib(&during) - gib(&before) - 40.0).abs() < 1.0, "its 40 GiB on the gauge: {during:?}");
    assert_eq!(during.gpu_util, Some(85), "its SM share as util");
    assert_eq!(
        during.memory_used.unwrap() + during.memory_free.unwrap(),
        before.memory_used.unwrap() + before.memory_free.unwrap()
    );
    assert!(gib(&after) < 1.0 && after.gpu_util == Some(0), "idle after: {after:?}");
}

#[test]
fn a_scripted_job_computes_as_its_util_says_and_a_spin_loop_does_not() {
    // GPU 0 (an H200, with GPM) runs a busy job, GPU 1 a spin loop at the same util, GPU 2 an idle holder.
    let sim = sim(3, &["job:0:ana:8:98@0s+10m", "job:1:bo:8:98:spin@0s+10m", "idle-holder:2@0s"]);
    let samples: Vec<_> = (0..120u64).map(|s| sim.sample(T0 + s * 1000)).collect();
    let last = samples.last().unwrap();
    let activity = sim.activity(T0 + 119_000);
    let sm = |gpu: usize| activity[gpu].1.sm_active.unwrap();
    let (power, temperature) =
        (|gpu: usize| last[gpu].power_draw_mw.unwrap(), |gpu: usize| last[gpu].temperature_c.unwrap());
    assert_eq!(last[0].gpu_util, Some(98));
    assert!(sm(0) > 80.0, "a busy job keeps the SMs busy: {}", sm(0));
    assert!(power(0) > 500_000 && temperature(0) > 55, "{:?}", last[0]);
    assert_eq!(last[1].gpu_util, Some(98), "the spin loop keeps util up");
    assert!(sm(1) < 1.0 && power(1) < 150_000 && temperature(1) < 40, "but the SMs idle: {} {:?}", sm(1), last[1]);
    assert!(last[2].gpu_util.unwrap() < 2 && sm(2) < 1.0 && temperature(2) < 40, "the holder is idle on every figure");
}
