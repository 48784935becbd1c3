//! The collectives experiment on the Lab page in a real browser: listed but greyed out with the reason on a
//! host without NCCL and on one without a GPU; its form's dtype and DDP-step fields, checked by the rule the
//! server applies too; and a one-GPU run saying what its figures mean.

use std::sync::Arc;
use std::time::Duration;

use fantoccini::{Client, Locator};
use gpudash::lab::SimulatedLab;
use gpudash::lab::guards::SimulatedProbe;
use gpudash::telemetry::NoGpus;
use gpudash::telemetry::simulator::Simulator;

use crate::browser::{eventually, js, texts, with_browser};
use crate::support::TestServer;

const FORM: &str = "form.lab-form[data-kind=collectives]";

/// `count` simulated GPUs with `probe`, each lab step 1 ms.
async fn server(count: u32, probe: SimulatedProbe) -> TestServer {
    let options = gpudash::Options {
        simulated_lab: SimulatedLab { probe: Some(Arc::new(probe)), step: Some(Duration::from_millis(1)) },
        ..gpudash::Options::new(Duration::from_millis(500))
    };
    TestServer::with_options(Box::new(Simulator::new(count, 500)), options).await
}

async fn first_text(c: &Client, css: &str) -> Option<String> {
    texts(c, css).await.into_iter().find(|t| !t.is_empty())
}

async fn open_lab(c: &Client, url: &str) {
    c.goto(url).await.expect("webdriver answers");
    c.wait().for_element(Locator::Css(FORM)).await.expect("the collectives form");
}

/// Clicks the element, scrolled to the middle of the window (clear of the sticky top bar).
async fn click(c: &Client, css: &str) {
    let element = c.wait().for_element(Locator::Css(css)).await.unwrap_or_else(|e| panic!("{css}: {e}"));
    let arg = serde_json::to_value(&element).expect("webdriver answers");
    c.execute("arguments[0].scrollIntoView({block: 'center'})", vec![arg]).await.expect("webdriver answers");
    element.click().await.unwrap_or_else(|e| panic!("click {css}: {e}"));
}

async fn type_into(c: &Client, css: &str, text: &str) {
    let input = c.wait().for_element(Locator::Css(css)).await.unwrap_or_else(|e| panic!("{css}: {e}"));
    input.clear().await.expect("webdriver answers");
    input.send_keys(text).await.expect("webdriver answers");
}

#[tokio::test]
async fn without_nccl_collectives_is_listed_greyed_out_with_the_reason() {
    let server = server(2, SimulatedProbe::default().without_nccl()).await;
    let url = server.url("/#lab");
    with_browser(1400, 1000, |c| async move {
        open_lab(&c, &url).await;
        let class = js(&c, &format!("return document.querySelector('{FORM}').className")).await;
        assert!(class.as_str().unwrap_or("").contains("lab-form-unavailable"), "{class}");
        let css = format!("{FORM} .lab-unavailable-reason");
        let reason = eventually(5, "the reason", || first_text(&c, &css)).await;
        assert!(reason.starts_with("Not available on this server: NCCL (libnccl.so.2) not found"), "{reason}");
        assert!(reason.contains("--nccl-lib / GPUDASH_NCCL_LIB"), "says how to point at it: {reason}");
        let disabled = |css: String| {
            let c = c.clone();
            async move { js(&c, &format!("return document.querySelector(\"{css}\").disabled")).await }
        };
        assert_eq!(disabled(format!("{FORM} button.run-button")).await, true, "its Run button is off");
        assert_eq!(disabled(format!("{FORM} select[name=dtype]")).await, true, "its fields are off");
        assert_eq!(disabled("button.run-button[data-kind=latency]".into()).await, false, "other experiments run");
        assert!(texts(&c, "form.lab-form[data-kind=latency] .lab-unavailable-reason").await.is_empty());
    })
    .await;
    server.stop().await;
}

#[tokio::test]
async fn without_a_gpu_every_experiment_is_listed_with_the_labs_reason() {
    let reason = "NVIDIA driver not available: libnvidia-ml.so.1: cannot open shared object file";
    let server = TestServer::with_source(Box::new(NoGpus::new(reason.into(), 1000)), 1000).await;
    let url = server.url("/#lab");
    with_browser(1280, 900, |c| async move {
        c.goto(&url).await.expect("webdriver answers");
        let css = "li.lab-experiment-off[data-kind=collectives]";
        let item = eventually(15, "collectives listed off", || first_text(&c, css)).await;
        assert!(item.contains("NCCL") || item.contains("Collectives"), "its title: {item}");
        assert!(item.contains("the GPU lab is unavailable:"), "with the reason: {item}");
        assert_eq!(
            texts(&c, "li.lab-experiment-off").await.len(),
            gpudash::lab::experiments::ALL.len(),
            "every experiment listed"
        );
        assert!(texts(&c, "button.run-button").await.is_empty());
    })
    .await;
    server.stop().await;
}

#[tokio::test]
async fn the_form_takes_a_dtype_and_the_ddp_step_and_one_gpu_says_what_busbw_means() {
    let server = server(1, SimulatedProbe::default()).await;
    let url = server.url("/#lab");
    with_browser(1400, 1000, |c| async move {
        open_lab(&c, &url).await;
        let options = js(
            &c,
            &format!("return [...document.querySelectorAll('{FORM} select[name=dtype] option')].map(o => o.value)"),
        )
        .await;
        assert_eq!(options, serde_json::json!(["fp32", "bf16"]));
        let ddp = texts(&c, &format!("{FORM} .lab-field[data-field^=ddp] .field-label, {FORM} .lab-switch")).await;
        for label in ["DDP step", "DDP parameters", "DDP dtype", "DDP bucket_cap_mb"] {
            // Labels are shown in capitals (CSS); the words are PyTorch's.
            assert!(ddp.iter().any(|l| l.to_lowercase().contains(&label.to_lowercase())), "{label} in {ddp:?}");
        }
        let parameters =
            js(&c, &format!("return document.querySelector(\"{FORM} input[name='ddp.parameters']\").value")).await;
        assert_eq!(parameters, "1.3 B");

        // A run on several GPUs is put to the server first: its rule's words, on the page.
        type_into(&c, &format!("{FORM} input[name='ddp.bucket_cap_mb']"), "0").await;
        click(&c, &format!("{FORM} button.run-button")).await;
        let css = format!("{FORM} .lab-error");
        let error = eventually(5, "the form's error", || first_text(&c, &css)).await;
        assert_eq!(error, "invalid parameters: 'ddp.bucket_cap_mb' must be from 1 to 1024, got '0'");

        type_into(&c, &format!("{FORM} input[name='ddp.bucket_cap_mb']"), "25").await;
        type_into(&c, &format!("{FORM} input[name='ddp.parameters']"), "100 M").await;
        type_into(&c, &format!("{FORM} input[name=sizes]"), "1 MiB").await;
        type_into(&c, &format!("{FORM} input[name=repetitions]"), "3").await;
        let bf16 = c.find(Locator::Css(&format!("{FORM} select[name=dtype]"))).await.expect("the dtype");
        bf16.select_by_value("bf16").await.expect("bf16 picked");
        click(&c, &format!("{FORM} button.run-button")).await;
        let notes = eventually(20, "the one-GPU run's notes", || async {
            let text = js(
                &c,
                "return [...document.querySelectorAll('#lab-run .lab-note')].map(e => e.textContent).join('\\n')",
            )
            .await;
            text.as_str().filter(|t| t.contains("need two GPUs")).map(str::to_owned)
        })
        .await;
        assert!(notes.contains("collectives need two GPUs to move data; this checks that NCCL works here."), "{notes}");
        assert!(
            notes.contains("broadcast's busbw (factor 1) is a copy within the GPU's memory, not a link speed"),
            "{notes}"
        );
        assert!(notes.contains("busbw is 0 by nccl-tests' formulas"), "{notes}");
        assert!(notes.contains("bf16"), "the dtype picked ran: {notes}");
        let headers = texts(&c, "#lab-run table.lab-figures th[title]").await;
        assert_eq!(headers.iter().map(|h| h.to_lowercase()).collect::<Vec<_>>(), ["min", "max"]);
        let title = js(&c, "return document.querySelector('#lab-run table.lab-figures th[title]').title").await;
        assert!(
            title.as_str().unwrap_or("").contains("for a time the fastest, for a bandwidth the slowest"),
            "{title}"
        );
    })
    .await;
    server.stop().await;
}

/// Issue 56, item 4: a collectives run takes every GPU, so the page puts it to the server first. Not forced,
/// a busy GPU's refusal is shown as the server words it, with no question that would end in it; forced,
/// the form asks first, naming everyone whose work the run goes beside; the run is labelled with all its
/// GPUs, and its view is brought into sight.
#[tokio::test]
async fn a_forced_run_on_several_gpus_names_who_it_disturbs_and_a_refusal_comes_before_any_question() {
    let server = server(4, SimulatedProbe::default().following_simulator()).await;
    // GPUs 0 and 2 start a simulated job at once (their owners are the page's names for them).
    eventually(10, "the simulator's jobs on GPUs 0 and 2", || async {
        let processes: serde_json::Value = crate::support::get_json(&server, "/api/processes").await;
        let list = processes["processes"].as_array()?;
        let owner = |d: u32| list.iter().find(|p| p["device"] == d)?["user"].as_str().map(str::to_owned);
        Some((owner(0)?, owner(2)?))
    })
    .await;
    let url = server.url("/#lab");
    with_browser(1280, 800, |c| async move {
        open_lab(&c, &url).await;
        type_into(&c, &format!("{FORM} input[name=sizes]"), "1 MiB").await;
        type_into(&c, &format!("{FORM} input[name=repetitions]"), "2").await;
        click(&c, &format!("{FORM} button.run-button")).await;
        let error_css = format!("{FORM} .lab-error");
        let refusal = eventually(10, "the server's refusal", || first_text(&c, &error_css)).await;
        assert!(refusal.contains("GPU 0 has 1 other process(es) computing") && refusal.contains("force"), "{refusal}");
        assert!(texts(&c, ".lab-confirm").await.is_empty(), "no question before a refusal");

        click(&c, "#lab-force").await;
        click(&c, &format!("{FORM} button.run-button")).await;
        let question_css = format!("{FORM} .lab-confirm-question");
        let question = eventually(10, "the question", || first_text(&c, &question_css)).await;
        assert!(question.starts_with("This run takes 4 GPUs at once"), "{question}");
        // The people named are the holders the question's own GPU lines show (GPUs 1 and 3 may have started
        // jobs of their own by now: those owners are named too).
        let holder = |gpu: u32| {
            let line = question.split(&format!("GPU {gpu} — busy: ")).nth(1)?;
            line.split(' ').next().map(str::to_owned)
        };
        let forced = question.split("Forced, it runs beside the work of ").nth(1).unwrap_or_default();
        for gpu in [0, 2] {
            let name = holder(gpu).unwrap_or_else(|| panic!("GPU {gpu} busy with a holder: {question}"));
            assert!(forced.contains(&name), "{name} of GPU {gpu} named: {question}");
        }
        let shown = js(&c, "return !!document.querySelector('#lab-run[data-run]')").await;
        assert_eq!(shown, false, "nothing queued before the answer");
        click(&c, &format!("{FORM} button.confirm-run")).await;
        let title = eventually(10, "the run's title", || first_text(&c, "#lab-run .lab-panel-title")).await;
        assert!(title.ends_with("collectives on GPUs 0, 1, 2, 3"), "{title}");
        let top = js(&c, "return document.querySelector('#lab-run').getBoundingClientRect().top").await;
        let height = js(&c, "return window.innerHeight").await;
        let (top, height) = (top.as_f64().unwrap_or(-1.0), height.as_f64().unwrap_or(0.0));
        assert!((0.0..height).contains(&top), "the run's view is in sight: top {top} of {height}");
        let gpus = eventually(10, "the recent run's GPUs", || first_text(&c, "#lab-runs td.recent-gpus")).await;
        assert_eq!(gpus, "0, 1, 2, 3");
    })
    .await;
    server.stop().await;
}
