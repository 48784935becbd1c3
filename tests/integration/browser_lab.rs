//! The Lab view in a real browser, against the simulated lab: forms, plan
//! notes, progress, the shared queue and Cancel, drawn results, recent runs,
//! the lab pool's empty_cache buttons, the experiments in PyTorch's words, and
//! the picker and confirm step that keep the lab off others' GPUs.

use std::time::Duration;

use fantoccini::{Client, Locator};
use gpudash::lab::SimulatedLab;
use gpudash::telemetry::NoGpus;
use gpudash::telemetry::simulator::Simulator;

use crate::browser::{eventually, js, save_screenshot, screenshot_dir, texts, with_browser};
use crate::support::TestServer;

/// Simulated GPUs whose lab sleeps `step_ms` per experiment step, so progress can be watched.
async fn lab_server(count: u32, step_ms: u64) -> TestServer {
    let options = gpudash::Options {
        simulated_lab: SimulatedLab { step: Some(Duration::from_millis(step_ms)), ..SimulatedLab::default() },
        ..gpudash::Options::new(Duration::from_millis(500))
    };
    TestServer::with_options(Box::new(Simulator::new(count, 500)), options).await
}

/// Clicks the element, scrolled to the middle of the window (clear of the sticky top bar).
async fn click(c: &Client, css: &str) {
    let element = c.wait().for_element(Locator::Css(css)).await.unwrap_or_else(|e| panic!("{css}: {e}"));
    let arg = serde_json::to_value(&element).expect("webdriver answers");
    c.execute("arguments[0].scrollIntoView({block: 'center'})", vec![arg]).await.expect("webdriver answers");
    element.click().await.unwrap_or_else(|e| panic!("click {css}: {e}"));
}

/// Replaces the text of a form's field.
async fn type_into(c: &Client, css: &str, text: &str) {
    let input = c.wait().for_element(Locator::Css(css)).await.unwrap_or_else(|e| panic!("{css}: {e}"));
    input.clear().await.expect("webdriver answers");
    input.send_keys(text).await.expect("webdriver answers");
}

async fn first_text(c: &Client, css: &str) -> Option<String> {
    texts(c, css).await.into_iter().find(|t| !t.is_empty())
}

/// Opens the page's Lab tab and waits for the forms.
async fn open_lab(c: &Client, url: &str) {
    c.goto(url).await.expect("webdriver answers");
    click(c, "#tab-lab").await;
    c.wait().for_element(Locator::Css("button.run-button[data-kind=latency]")).await.expect("webdriver answers");
}

async fn draws(c: &Client, run: u64) -> u64 {
    js(c, &format!("const k = document.querySelector('canvas.lab-chart[data-run=\"{run}\"]'); return k ? +k.getAttribute('data-draws') : 0"))
        .await
        .as_u64()
        .unwrap_or(0)
}

/// The run the view shows.
async fn shown_run(c: &Client) -> Option<u64> {
    js(c, "const v = document.querySelector('#lab-run[data-run]'); return v ? +v.getAttribute('data-run') : null")
        .await
        .as_u64()
}

#[tokio::test]
async fn a_lab_run_shows_its_plan_progress_chart_figures_and_notes() {
    let server = lab_server(2, 250).await;
    let url = server.url("/");
    with_browser(1400, 1000, |c| async move {
        open_lab(&c, &url).await;
        let form = "form.lab-form[data-kind=latency]";
        // Picking the GPU already shown fires no `change`: go through GPU 1 so that GPU 0 is the
        // reader's own choice, which the picker's default never moves.
        let picker = c.find(Locator::Css("#lab-device")).await.unwrap();
        picker.clone().select_by_value("1").await.unwrap();
        picker.select_by_value("0").await.unwrap();

        // The page names a bad number itself; the server's range refusal is shown as it is.
        type_into(&c, &format!("{form} input[name=repetitions]"), "lots").await;
        click(&c, "button.run-button[data-kind=latency]").await;
        let form_error = format!("{form} .lab-error");
        let error = eventually(5, "the page's own error", || first_text(&c, &form_error)).await;
        assert_eq!(error, "'repetitions' must be a whole number, not 'lots'");
        type_into(&c, &format!("{form} input[name=repetitions]"), "5").await;
        click(&c, "button.run-button[data-kind=latency]").await;
        let refused = eventually(5, "the server's 400", || async {
            first_text(&c, &form_error).await.filter(|t| !t.contains("whole number"))
        })
        .await;
        assert!(refused.contains("repetitions"), "{refused}");

        type_into(&c, &format!("{form} input[name=repetitions]"), "2000").await;
        click(&c, "button.run-button[data-kind=latency]").await;
        let plan_notes = format!("{form} .lab-plan li");
        let plan = eventually(5, "the plan notes", || first_text(&c, &plan_notes)).await;
        assert!(!plan.is_empty());
        assert!(texts(&c, &form_error).await.is_empty(), "the error is gone once the run is queued");
        let run = eventually(5, "the new run in the view", || shown_run(&c)).await;

        // Progress while it runs, in the view and in the queue every viewer sees.
        let progress = eventually(10, "progress of the running run", || async {
            let shown = first_text(&c, "#lab-run .run-progress .progress-percent").await?;
            let queued = first_text(&c, &format!("#lab-queue tr.queue-entry[data-run=\"{run}\"]")).await?;
            (shown != "0%").then_some((shown, queued))
        })
        .await;
        assert!(progress.0.ends_with('%'), "{progress:?}");

        // The result: a drawn chart, the figures, SIMULATED, and the run in the recent list.
        eventually(15, "the latency chart drawn", || async { (draws(&c, run).await > 0).then_some(()) }).await;
        let figures = texts(&c, "#lab-run table.lab-figures tbody tr").await;
        // The latency figures, then what GPM saw during the run (when a window fell inside it).
        let (gpm, figures): (Vec<_>, Vec<_>) = figures.into_iter().partition(|f| f.contains("(GPM)"));
        assert_eq!(figures.len(), 6, "{figures:?}");
        assert!(gpm.len() == 2 || gpm.is_empty(), "SM and tensor activity, or none: {gpm:?}");
        assert!(figures[0].contains("kernel launch"), "{figures:?}");
        assert!(first_text(&c, "#lab-run .run-head").await.unwrap().contains("SIMULATED"));
        assert!(texts(&c, "#lab-queue tr.queue-entry").await.is_empty(), "the queue is empty again");
        let recent = eventually(5, "the run among the recent ones", || async {
            first_text(&c, &format!("#lab-runs tr.recent-run[data-run=\"{run}\"]"))
                .await
                .map(|t| t.to_lowercase())
                .filter(|t| t.contains("succeeded"))
        })
        .await;
        assert!(recent.contains("latency"), "{recent}");
        let svg = c.find(Locator::Css("#lab-run a.run-svg")).await.unwrap().attr("href").await.unwrap();
        assert_eq!(svg.as_deref(), Some(format!("/api/runs/{run}/chart.svg").as_str()));
        let inked = js(
            &c,
            &format!(
                "const k = document.querySelector('canvas.lab-chart[data-run=\"{run}\"]'); const d = k.getContext('2d')\
                 .getImageData(0, 0, k.width, k.height).data; let n = 0; \
                 for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n;"
            ),
        )
        .await;
        assert!(inked.as_u64().unwrap() > 1000, "the chart canvas is blank: {inked}");

        // Each copy kind's checkbox says the path it takes.
        let title = js(
            &c,
            "return document.querySelector('form.lab-form[data-kind=transfer] input[value=d2d_kernel]')\
             .closest('label').title;",
        )
        .await;
        assert_eq!(title.as_str(), Some("D2D (SM copy kernel, one 16-byte vector per thread)"), "{title}");

        // A transfer run (two sizes) says why its pageable figures can be trusted.
        type_into(&c, "form.lab-form[data-kind=transfer] input[name=sizes]", "4 KiB, 1 MiB").await;
        click(&c, "button.run-button[data-kind=transfer]").await;
        let transfer =
            eventually(5, "the transfer run in the view", || async { shown_run(&c).await.filter(|id| *id != run) })
                .await;
        eventually(20, "the transfer chart drawn", || async { (draws(&c, transfer).await > 0).then_some(()) }).await;
        let note = eventually(5, "the zero-page note", || first_text(&c, "#lab-run .lab-note-key")).await;
        assert!(note.contains("Host buffers are written before they are timed"), "{note}");
        assert!(note.contains("zero page"), "{note}");
        let legend = texts(&c, "#lab-run .lab-legend li").await;
        assert!(legend.iter().any(|l| l == "h2d_pinned"), "{legend:?}");
        let chart = c.find(Locator::Css("#lab-run")).await.unwrap();
        std::fs::write(screenshot_dir().join("lab-transfer.png"), chart.screenshot().await.unwrap()).unwrap();

        // Clicking an older run shows it again.
        click(&c, &format!("#lab-runs tr.recent-run[data-run=\"{run}\"] .view-run")).await;
        eventually(5, "the latency run shown again", || async { (shown_run(&c).await == Some(run)).then_some(()) })
            .await;
        eventually(10, "its chart drawn again", || async { (draws(&c, run).await > 0).then_some(()) }).await;

        // The transfer left the lab's pool holding memory on GPU 0: empty_cache, on the Lab (not the
        // Dashboard's cards), hands it back, and says whose pool it is.
        assert_eq!(js(&c, "return document.querySelectorAll('.gpu-card button.empty-cache').length").await, 0);
        let help = first_text(&c, "#lab-pool .lab-pool-help").await.unwrap_or_default();
        assert!(help.contains("the lab's own pool") && help.contains("does not touch your process's"), "{help}");
        // The button is disabled while the lab's status still shows a run on GPU 0.
        eventually(10, "empty_cache enabled", || async {
            let enabled = js(&c, "const b = document.querySelector('#lab-pool .lab-pool-gpu[data-index=\"0\"] button.empty-cache'); return !!b && !b.disabled").await;
            (enabled == serde_json::Value::Bool(true)).then_some(())
        })
        .await;
        click(&c, "#lab-pool .lab-pool-gpu[data-index=\"0\"] button.empty-cache").await;
        let released = eventually(10, "released", || {
            first_text(&c, "#lab-pool .lab-pool-gpu[data-index=\"0\"] .empty-cache-result")
        })
        .await;
        assert!(released.starts_with("released "), "{released}");
        assert_ne!(released, "released 0 B", "the transfer's buffers were cached");

        click(&c, "#tab-dashboard").await;
        click(&c, "#tab-lab").await;
        eventually(10, "the chart drawn after the tab switch", || async { (draws(&c, run).await > 0).then_some(()) })
            .await;
        save_screenshot(&c, "lab.png").await;
    })
    .await;
    server.stop().await;
}

#[tokio::test]
async fn the_queue_shows_a_run_waiting_behind_another_and_cancel_removes_it() {
    let server = lab_server(1, 250).await;
    let url = server.url("/");
    with_browser(1400, 1000, |c| async move {
        open_lab(&c, &url).await;
        // The whole transfer sweep takes 50 steps: long enough to queue behind it.
        click(&c, "button.run-button[data-kind=transfer]").await;
        let first = eventually(5, "the transfer run", || shown_run(&c)).await;
        click(&c, "button.run-button[data-kind=latency]").await;
        let second = eventually(5, "the latency run", || async { shown_run(&c).await.filter(|id| *id != first) }).await;

        let rows = eventually(10, "two runs in the queue", || async {
            let rows: Vec<String> =
                texts(&c, "#lab-queue tr.queue-entry").await.iter().map(|r| r.to_lowercase()).collect();
            (rows.len() == 2).then_some(rows)
        })
        .await;
        assert!(rows[0].contains("running") && rows[0].contains("transfer"), "{rows:?}");
        assert!(rows[1].contains("queued") && rows[1].contains("latency"), "{rows:?}");
        // Issue 56, item 5: without tokens the one local user is named as bookings name them, not "anonymous".
        let me = gpudash::auth::local_user_name().to_lowercase();
        assert!(rows[1].contains(&me) && !rows[1].contains("anonymous"), "who asked: {rows:?}");

        click(&c, &format!("#lab-queue tr.queue-entry[data-run=\"{second}\"] button.cancel-run")).await;
        eventually(10, "the cancelled run gone from the queue", || async {
            let rows = texts(&c, "#lab-queue tr.queue-entry").await;
            (rows.len() == 1 && rows[0].contains("transfer")).then_some(())
        })
        .await;
        eventually(5, "'cancelled' in the recent runs", || async {
            first_text(&c, &format!("#lab-runs tr.recent-run[data-run=\"{second}\"]"))
                .await
                .map(|t| t.to_lowercase())
                .filter(|t| t.contains("cancelled"))
        })
        .await;

        // While GPU 0 runs, its empty_cache waits, and says why.
        let pool_button = "#lab-pool .lab-pool-gpu[data-index=\"0\"] button.empty-cache";
        let button = c.wait().for_element(Locator::Css(pool_button)).await.unwrap();
        assert!(button.attr("disabled").await.unwrap().is_some(), "disabled while a run is on the GPU");
        let title = button.attr("title").await.unwrap().unwrap_or_default();
        assert!(title.contains("queued or running"), "{title}");

        // A running run is cancelled at its next step.
        click(&c, &format!("#lab-queue tr.queue-entry[data-run=\"{first}\"] button.cancel-run")).await;
        eventually(10, "an empty queue", || async {
            texts(&c, "#lab-queue tr.queue-entry").await.is_empty().then_some(())
        })
        .await;
    })
    .await;
    server.stop().await;
}

#[tokio::test]
async fn without_cuda_the_lab_says_why_and_the_dashboard_still_works() {
    let reason = "NVIDIA driver not available: libnvidia-ml.so.1: cannot open shared object file";
    let server = TestServer::with_source(Box::new(NoGpus::new(reason.into(), 1000)), 1000).await;
    let status: serde_json::Value = reqwest::get(server.url("/api/lab")).await.unwrap().json().await.unwrap();
    let url = server.url("/#lab");
    with_browser(1280, 900, |c| async move {
        c.goto(&url).await.unwrap();
        let text = eventually(15, "#lab-unavailable", || first_text(&c, "#lab-unavailable")).await;
        assert!(text.starts_with("Lab unavailable: "), "{text}");
        assert!(text.contains(status["reason"].as_str().unwrap_or("?")), "{text} vs {status}");
        assert!(texts(&c, "button.run-button").await.is_empty());
        click(&c, "#tab-dashboard").await;
        eventually(10, "the no-GPU notice", || first_text(&c, "#no-gpus")).await;
    })
    .await;
    server.stop().await;
}

/// The `<option>` texts of the GPU picker, by value.
async fn picker(c: &Client) -> Vec<(String, String)> {
    let options =
        js(c, "return [...document.querySelectorAll('#lab-device option')].map(o => [o.value, o.textContent])").await;
    serde_json::from_value(options).unwrap_or_default()
}

#[tokio::test]
async fn the_lab_speaks_pytorch_and_asks_before_taking_every_gpu() {
    let server = lab_server(4, 20).await;
    // GPUs 0 and 2 start a simulated job at once; 1 and 3 idle for 20 s or more.
    eventually(10, "the simulator's jobs on GPUs 0 and 2", || async {
        let processes: serde_json::Value = crate::support::get_json(&server, "/api/processes").await;
        let on = |d: u32| processes["processes"].as_array().is_some_and(|l| l.iter().any(|p| p["device"] == d));
        (on(0) && on(2)).then_some(())
    })
    .await;
    let url = server.url("/");
    with_browser(1400, 1000, |c| async move {
        open_lab(&c, &url).await;
        // The picker starts on the first free GPU, and every option says its state and owner.
        let chosen = eventually(10, "a free GPU picked", || async {
            let value = js(&c, "return document.querySelector('#lab-device').value").await;
            value.as_str().filter(|v| *v != "0").map(str::to_owned)
        })
        .await;
        assert_eq!(chosen, "1");
        let options = picker(&c).await;
        assert_eq!(options.len(), 4, "{options:?}");
        assert!(options[0].1.starts_with("GPU 0 — busy: ") && options[0].1.contains("GiB"), "{options:?}");
        assert!(options[1].1.starts_with("GPU 1 — free"), "{options:?}");

        // Each form shows its experiment in PyTorch.
        let snippet =
            js(&c, "return document.querySelector('form.lab-form[data-kind=transfer] .lab-pytorch code').textContent")
                .await;
        assert!(snippet.as_str().is_some_and(|s| s.contains("pin_memory=True") && s.contains("non_blocking=True")));

        // p2p takes every GPU: the form asks first, naming each with its owner; Cancel queues nothing.
        click(&c, "button.run-button[data-kind=p2p]").await;
        let question =
            eventually(5, "the confirm step", || first_text(&c, "form.lab-form[data-kind=p2p] .lab-confirm-question"))
                .await;
        assert!(question.starts_with("This run takes 4 GPUs at once"), "{question}");
        assert!(question.contains("GPU 0 — busy: ") && question.contains("GPU 1 — free"), "{question}");
        click(&c, "form.lab-form[data-kind=p2p] button.cancel-run").await;
        eventually(5, "the question gone", || async { texts(&c, ".lab-confirm").await.is_empty().then_some(()) }).await;
        assert_eq!(shown_run(&c).await, None, "nothing was queued");
        type_into(&c, "form.lab-form[data-kind=p2p] input[name=repetitions]", "2").await;
        click(&c, "button.run-button[data-kind=p2p]").await;
        click(&c, "form.lab-form[data-kind=p2p] button.confirm-run").await;
        let p2p = eventually(5, "the p2p run", || shown_run(&c)).await;

        // Its result: the takeaway computed from its figures, and the snippet, under the heatmaps.
        eventually(20, "the heatmaps drawn", || async { (draws(&c, p2p).await > 0).then_some(()) }).await;
        let takeaway = eventually(5, "the takeaway", || first_text(&c, "#lab-run .lab-takeaway")).await;
        assert!(takeaway.starts_with("Takeaway: peer access made copies") && takeaway.contains("GB/s"), "{takeaway}");
        let code = first_text(&c, "#lab-run .lab-pytorch code").await.unwrap_or_default();
        assert!(code.contains("torch.cuda.can_device_access_peer"), "{code}");
        // Long notes show their first sentence; the rest opens on demand.
        let summaries = texts(&c, "#lab-run .lab-note-long summary").await;
        assert!(summaries.iter().any(|s| s.starts_with("Bandwidth: one ")), "{summaries:?}");

        // The memory run: the takeaway says what empty_cache returned; the chart names its steps.
        click(&c, "button.run-button[data-kind=memory]").await;
        let memory = eventually(5, "the memory run", || async { shown_run(&c).await.filter(|id| *id != p2p) }).await;
        eventually(20, "the memory chart drawn", || async { (draws(&c, memory).await > 0).then_some(()) }).await;
        let takeaway = eventually(5, "the memory takeaway", || first_text(&c, "#lab-run .lab-takeaway")).await;
        assert!(takeaway.starts_with("Takeaway: empty_cache() returned 2.00 GiB to the driver"), "{takeaway}");
        let legend = texts(&c, "#lab-run .lab-legend li").await;
        assert!(legend.iter().any(|l| l == "device used (NVML), change since start"), "{legend:?}");
        let dir = screenshot_dir();
        let view = c.find(Locator::Css("#lab-run")).await.unwrap();
        std::fs::write(dir.join("lab-memory.png"), view.screenshot().await.unwrap()).unwrap();
        click(&c, &format!("#lab-runs tr.recent-run[data-run=\"{p2p}\"] .view-run")).await;
        eventually(10, "the heatmaps drawn again", || async { (draws(&c, p2p).await > 0).then_some(()) }).await;
        let view = c.find(Locator::Css("#lab-run")).await.unwrap();
        std::fs::write(dir.join("lab-p2p.png"), view.screenshot().await.unwrap()).unwrap();
    })
    .await;
    server.stop().await;
}
