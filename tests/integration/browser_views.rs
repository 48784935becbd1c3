//! Views in a real browser (issue 32): a link restores the tab, an open GPU card, the process
//! filter and order, the History range and drill-down (bad values fall back, never break the page);
//! Back returns to the previous tab; "Free: GPU n" opens that GPU's card with Reserve and Run in the
//! Lab; and 64 GPUs show as a grid whose every state is on one 1280×800 screen.

use std::time::Duration;

use fantoccini::actions::{InputSource, MouseActions, PointerAction};
use fantoccini::{Client, Locator};
use gpudash::telemetry::simulator::Simulator;

use crate::browser::{eventually, js, save_screenshot, texts, with_browser};
use crate::support::TestServer;

async fn click(c: &Client, css: &str) {
    // As a script does: the sticky top bar may cover the element where the page now stands.
    js(c, &format!("document.querySelector(\"{css}\").click()")).await;
}

async fn hash(c: &Client) -> String {
    js(c, "return location.hash").await.as_str().unwrap_or_default().to_owned()
}

/// The state a link restores, read in one script: open cards, the process filter's GPU, the sorted
/// column and its direction, the range pressed and the History GPU.
async fn restored(c: &Client) -> serde_json::Value {
    js(
        c,
        "const v = s => { const e = document.querySelector(s); return e ? e.value : null; }; \
         const sorted = document.querySelector('#processes th.sorted'); \
         const range = document.querySelector('#range-picker button[aria-pressed=true]'); \
         return { cards: [...document.querySelectorAll('.gpu-row-detail .gpu-card')].map(c => c.dataset.index), \
                  on: v('#process-filter-gpu'), \
                  sort: sorted ? [sorted.querySelector('button').dataset.sort, sorted.getAttribute('aria-sort')] : null, \
                  range: range ? range.dataset.range : null, history: v('#history-gpu') }",
    )
    .await
}

#[tokio::test]
async fn a_link_restores_a_card_the_filter_the_order_and_the_range_and_back_returns() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::with_history(8, 500, dir.path()).await;
    with_browser(1280, 800, |c| async move {
        c.goto(&server.url("/#dashboard?gpu=3&on=2&sort=pid:asc&range=1h&history=5")).await.unwrap();
        let expected = serde_json::json!({
            "cards": ["3"], "on": "2", "sort": ["pid", "ascending"], "range": "1h", "history": "5"
        });
        eventually(15, "the linked view", || async { (restored(&c).await == expected).then_some(()) }).await;

        // A change is written back, so the link in the address bar is the view on screen.
        click(&c, "#range-picker button[data-range='24h']").await;
        eventually(5, "the range in the URL", || async { hash(&c).await.contains("range=24h").then_some(()) }).await;
        let link = hash(&c).await;
        assert!(link.starts_with("#dashboard?gpu=3&on=2&sort=pid:asc"), "{link}");

        // Another tab, then Back: the dashboard as it was.
        click(&c, "#tab-lab").await;
        eventually(5, "the Lab shown", || async { (hash(&c).await == "#lab").then_some(()) }).await;
        c.back().await.unwrap();
        eventually(10, "Back to the dashboard as it was", || async {
            let hidden = js(&c, "return document.querySelector('#panel-dashboard').hidden").await;
            (hidden == false && hash(&c).await == link).then_some(())
        })
        .await;

        // A reload of the shared link shows the same.
        c.refresh().await.unwrap();
        let again = serde_json::json!({
            "cards": ["3"], "on": "2", "sort": ["pid", "ascending"], "range": "24h", "history": "5"
        });
        eventually(15, "the view after a reload", || async { (restored(&c).await == again).then_some(()) }).await;

        // Bad values are left at their defaults; the page works.
        c.goto("about:blank").await.unwrap();
        c.goto(&server.url("/#dashboard?gpu=x,3&on=-1&sort=pid:sideways&range=2y&history=all&layout=3d"))
            .await
            .unwrap();
        let defaults = serde_json::json!({
            "cards": [], "on": "", "sort": ["memory", "descending"], "range": "5m", "history": "all"
        });
        eventually(15, "the defaults", || async { (restored(&c).await == defaults).then_some(()) }).await;
        assert_eq!(texts(&c, "tr.gpu-row").await.len(), 8, "the overview is drawn");
    })
    .await;
}

#[tokio::test]
async fn a_free_gpu_opens_its_card_with_reserve_and_run_in_the_lab() {
    let server = TestServer::simulated(8, 500).await;
    with_browser(1280, 800, |c| async move {
        c.goto(&server.url("/")).await.unwrap();
        let free = eventually(15, "a free GPU", || async {
            let index =
                js(&c, "const b = document.querySelector('#free-gpus button'); return b ? b.dataset.index : null")
                    .await;
            index.as_str().map(str::to_owned)
        })
        .await;
        click(&c, &format!("#free-gpus button[data-index='{free}']")).await;
        let card = format!("#gpu-detail-{free} .gpu-card");
        let actions = eventually(10, "the free GPU's card with its actions", || async {
            let buttons = texts(&c, &format!("{card} .gpu-card-actions button")).await;
            (!buttons.is_empty()).then_some(buttons)
        })
        .await;
        assert_eq!(actions, ["Reserve", "Run in the Lab"]);
        assert_eq!(js(&c, "return document.querySelector('#process-filter-gpu').value").await, "", "no empty table");
        assert!(hash(&c).await.contains(&format!("gpu={free}")), "the open card is in the link");

        // Reserve: the form with this GPU ticked.
        click(&c, &format!("{card} .card-reserve")).await;
        let ticked = format!("#reservation-form input[type=checkbox][value='{free}']");
        eventually(5, "the GPU ticked in the form", || async {
            (js(&c, &format!("return document.querySelector(\"{ticked}\").checked")).await == true).then_some(())
        })
        .await;

        // Run in the Lab: the Lab, on this GPU.
        click(&c, &format!("{card} .card-lab")).await;
        eventually(15, "the Lab on the free GPU", || async {
            let picked = js(&c, "const s = document.querySelector('#lab-device'); return s ? s.value : null").await;
            (picked.as_str() == Some(free.as_str()) && hash(&c).await == format!("#lab?gpu={free}")).then_some(())
        })
        .await;
    })
    .await;
}

#[tokio::test]
async fn sixty_four_gpus_show_every_state_on_one_screen_as_a_grid() {
    let dir = tempfile::tempdir().unwrap();
    // A few faults, so that the grid shows every kind of state.
    let faults = ["xid:6:79@0s", "hot:12@0s", "ecc:21@0s", "memory-full:33@0s", "lost:40@0s"];
    let simulator = faults.iter().fold(Simulator::new(64, 1000), |s, f| s.with_fault(f.parse().unwrap()));
    let store = gpudash::store::Store::open(dir.path(), true, gpudash::store::Retention::default()).unwrap();
    let options = gpudash::Options { store: Some(store), ..gpudash::Options::new(Duration::from_millis(1000)) };
    let server = TestServer::with_options(Box::new(simulator), options).await;
    with_browser(1280, 800, |c| async move {
        c.goto(&server.url("/")).await.unwrap();
        // Every tile drawn, with its state in words, inside the first 800 px.
        let tiles = "return [...document.querySelectorAll('li.gpu-tile')].map(t => \
                     [t.dataset.index, t.querySelector('.tile-state').textContent, t.getBoundingClientRect().bottom, \
                      t.className])";
        let seen = eventually(20, "64 tiles with states", || async {
            let all = js(&c, tiles).await;
            let all = all.as_array()?.clone();
            (all.len() == 64 && all.iter().all(|t| !t[1].as_str().unwrap_or("").is_empty())).then_some(all)
        })
        .await;
        let inner = js(&c, "return innerHeight").await.as_f64().unwrap();
        for tile in &seen {
            assert!(tile[2].as_f64().unwrap() <= inner, "GPU {} below the first screen: {tile:?}", tile[0]);
        }
        assert_eq!(texts(&c, "tr.gpu-row").await.len(), 0, "no 64-row table");
        eventually(15, "GPU 6 unhealthy and GPU 40 lost, in words", || async {
            let six = texts(&c, "li.gpu-tile[data-index='6'] .tile-state").await.concat();
            let forty = texts(&c, "li.gpu-tile[data-index='40'] .tile-state").await.concat();
            (six.contains("unhealthy: XID 79") && forty == "lost").then_some(())
        })
        .await;
        save_screenshot(&c, "screenshot-64.png").await;

        // A tile's tooltip is written when the pointer (or the focus) comes to it, not into 64 tiles
        // at every tick: none has one yet, the hovered tile gets its own, and ticks write no more.
        let titled = "return [...document.querySelectorAll('li.gpu-tile button')].filter(b => b.title).length";
        assert_eq!(js(&c, titled).await, 0, "no tile title written before a hover or a focus");
        let six = c.find(Locator::Css("li.gpu-tile[data-index='6'] button")).await.unwrap();
        let hover = MouseActions::new("mouse".into()).then(PointerAction::MoveToElement {
            element: six,
            duration: None,
            x: 0.0,
            y: 0.0,
        });
        c.perform_actions(hover).await.expect("the pointer moved onto GPU 6");
        let title = eventually(5, "GPU 6's tile title after the pointer came", || async {
            let title = js(&c, "return document.querySelector(\"li.gpu-tile[data-index='6'] button\").title").await;
            title.as_str().filter(|t| !t.is_empty()).map(str::to_owned)
        })
        .await;
        // A job may hold GPU 6 too ("busy, unhealthy: XID 79 · …"): the reason is what must be there.
        assert!(title.starts_with("GPU 6: ") && title.contains("unhealthy: XID 79 · util "), "{title}");
        js(
            &c,
            "window.__titles = 0; window.__figures = 0; new MutationObserver(ms => ms.forEach(m => \
             { if (m.type === 'attributes') window.__titles++; else window.__figures++; })) \
             .observe(document.querySelector('#gpu-grid'), { subtree: true, attributes: true, \
             attributeFilter: ['title'], characterData: true, childList: true })",
        )
        .await;
        eventually(30, "the tiles' figures redrawn by a few ticks", || async {
            (js(&c, "return window.__figures").await.as_u64()? >= 64).then_some(())
        })
        .await;
        assert_eq!(js(&c, "return window.__titles").await, 0, "ticks wrote tile titles");
        assert_eq!(js(&c, titled).await, 1, "only the hovered tile has a title");

        // The state filter leaves exactly the free ones: every tile shown is free and every free one
        // is shown, read in one pass (the simulator's jobs come and go meanwhile).
        js(
            &c,
            "const s = document.querySelector('#grid-state'); s.value = 'free'; s.dispatchEvent(new Event('change'))",
        )
        .await;
        let shown = eventually(5, "only free tiles, and all of them", || async {
            let split = js(
                &c,
                "return [...document.querySelectorAll('li.gpu-tile')].map(t => \
                 [t.hidden, t.classList.contains('state-free')])",
            )
            .await;
            let split = split.as_array()?.clone();
            let exact = split.iter().all(|t| t[0] != t[1]);
            let shown = split.iter().filter(|t| t[0] == false).count();
            (split.len() == 64 && exact && shown > 0 && hash(&c).await.contains("state=free")).then_some(shown)
        })
        .await;
        assert!(shown < 64, "the faulty GPUs are filtered out");

        // The long sections are folded under the grid; History, unfolded, draws a chart's top lines,
        // each in its own colour, and counts the others.
        let folded =
            js(&c, "return [...document.querySelectorAll('details.dash-fold')].map(d => [d.id, d.open])").await;
        let expected = ["reservations", "processes", "pytorch", "history"]
            .map(|k| serde_json::json!([format!("fold-{k}"), false]));
        assert_eq!(folded, serde_json::json!(expected));
        click(&c, "#fold-history > summary").await;
        let legend = eventually(20, "the memory chart's legend", || async {
            let chips = texts(&c, ".history-cell[data-metric='memory_used'] .history-legend li").await;
            (!chips.is_empty()).then_some(chips)
        })
        .await;
        assert!(legend.len() <= 9, "{legend:?}");
        assert!(legend.last().unwrap().contains("56 others"), "{legend:?}");
        let colours = js(
            &c,
            "return [...new Set([...document.querySelectorAll(\".history-cell[data-metric='memory_used'] \
             .history-swatch\")].map(s => s.style.background))].length",
        )
        .await;
        assert_eq!(colours, 8, "eight lines, eight colours");

        // axe-core finds nothing serious in the grid, a card opened from it, and the unfolded History.
        click(&c, "li.gpu-tile[data-index='5'] button").await;
        eventually(10, "GPU 5's card under the grid", || async {
            (!texts(&c, "#gpu-detail-5 .gpu-card").await.is_empty()).then_some(())
        })
        .await;
        let axe = crate::browser_a11y::axe_source();
        assert_eq!(js(&c, &format!("{axe}\n;return typeof window.axe")).await, "object", "axe-core loads");
        let found = crate::browser_a11y::axe_violations(&c).await;
        assert!(found.is_empty(), "axe-core at 64 GPUs:\n{}", found.join("\n"));

        // The table, when asked for.
        click(&c, "#layout-toggle").await;
        eventually(10, "the table of 64 rows", || async { (texts(&c, "tr.gpu-row").await.len() == 64).then_some(()) })
            .await;
        assert!(hash(&c).await.contains("layout=table"));
    })
    .await;
}
