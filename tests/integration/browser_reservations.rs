//! Reservations in a real browser: the local user books GPU 1 from the page's form, the card
//! shows the holder, the time left and that nothing is enforced, "Free" leaves GPU 1 out, and
//! Release ends it.

use fantoccini::{Client, Locator};
use gpudash::telemetry::simulator::Simulator;
use serde_json::Value;
use shared::reservations::ReservationsResponse;

use crate::browser::{eventually, texts, with_browser};
use crate::support::{TestServer, get_json};

/// What the form's field `css` holds.
async fn field_value(c: &Client, css: &str) -> String {
    let field = c.find(Locator::Css(css)).await.unwrap();
    field.prop("value").await.unwrap().unwrap_or_default()
}

/// Replaces what the form's field `css` holds with `text`, typed.
async fn type_into(c: &Client, css: &str, text: &str) {
    let field = c.find(Locator::Css(css)).await.unwrap();
    field.clear().await.unwrap();
    field.send_keys(text).await.unwrap();
}

/// The text of GPU `index`'s reservation line on its card, once there is one.
async fn card_line(c: &Client, index: u32) -> Option<String> {
    texts(c, &format!(".gpu-card[data-index='{index}'] .reserved-by")).await.into_iter().next()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserve_from_the_page_see_the_card_and_release() {
    // Both GPUs stay free, so "Free" changes only through the reservation.
    let sim = Simulator::new(2, 250)
        .with_fault("job-ends:0@0s".parse().unwrap())
        .with_fault("job-ends:1@0s".parse().unwrap());
    let server =
        TestServer::with_options(Box::new(sim), gpudash::Options::new(std::time::Duration::from_millis(250))).await;
    let url = server.url("/");
    let shared = &server;
    with_browser(1400, 1200, |c| async move {
        let server = shared;
        c.goto(&url).await.unwrap();
        // The holder shows on the card, which opens from the GPU's row.
        crate::browser_overview::open_all_cards(&c, 2).await;
        eventually(20, "the form and both free GPUs", || async {
            let free = texts(&c, "#free-gpus").await.into_iter().next()?;
            let boxes = texts(&c, "#reservation-form .reservation-gpu").await;
            (free == "Free: GPU 0, GPU 1" && boxes.len() == 2).then_some(())
        })
        .await;
        let advisory = texts(&c, ".reservations-advisory").await.join(" ");
        assert!(advisory.contains("nothing is enforced on the GPU"), "{advisory}");

        c.find(Locator::Css("#reservation-form input[type=checkbox][value='1']")).await.unwrap().click().await.unwrap();
        let note = c.find(Locator::Css(".reservation-note-input")).await.unwrap();
        note.send_keys("fine-tuning").await.unwrap();
        c.find(Locator::Css(".reservation-submit")).await.unwrap().click().await.unwrap();

        let listed = eventually(10, "the server to hold the reservation", || async {
            let r: ReservationsResponse = get_json(server, "/api/reservations").await;
            (r.reservations.len() == 1).then(|| r.reservations[0].clone())
        })
        .await;
        assert_eq!((listed.devices.as_slice(), listed.note.as_str()), (&[1][..], "fine-tuning"));
        let line = eventually(10, "GPU 1's card to show the holder", || card_line(&c, 1)).await;
        // Booked for two hours from the form's defaults (whole minutes): 1h 5xm or 2h 0m left, in
        // shared::time::duration's one format.
        let left = line.strip_prefix(&format!("Reserved by {} for ", listed.user)).unwrap_or_else(|| panic!("{line}"));
        assert!(left.starts_with("1h 5") || left.starts_with("2h"), "{line}");
        assert!(left.contains(" — advisory, not enforced"), "{line}");
        assert!(line.contains("fine-tuning"), "{line}");
        assert!(card_line(&c, 0).await.is_none(), "GPU 0 is not reserved");
        let state = format!("reserved by {}", listed.user);
        eventually(10, "GPU 1's row to say who reserved it", || async {
            let shown = texts(&c, "tr.gpu-row[data-index='1'] .ov-state").await.concat();
            (shown == state && texts(&c, "tr.gpu-row[data-index='0'] .ov-state").await.concat() == "free").then_some(())
        })
        .await;
        eventually(10, "Free to leave GPU 1 out", || async {
            let free = texts(&c, "#free-gpus").await.into_iter().next()?;
            let api: Value = get_json(server, "/api/processes").await;
            (free == "Free: GPU 0" && api["free_devices"] == serde_json::json!([0])).then_some(())
        })
        .await;
        let row = texts(&c, "tr.reservation-row").await.join(" ");
        assert!(row.contains(&listed.user) && row.contains("fine-tuning"), "{row}");

        c.find(Locator::Css("tr.reservation-row .reservation-release")).await.unwrap().click().await.unwrap();
        eventually(10, "the release to reach the server and the page", || async {
            let r: ReservationsResponse = get_json(server, "/api/reservations").await;
            let free = texts(&c, "#free-gpus").await.into_iter().next()?;
            let gone = card_line(&c, 1).await.is_none() && texts(&c, "tr.reservation-row").await.is_empty();
            (r.reservations.is_empty() && gone && free == "Free: GPU 0, GPU 1").then_some(())
        })
        .await;
    })
    .await;
    server.stop().await;
}

/// Issue 32, item 8: the form writes and takes a moment as the tables do ("3 Dec 13:00", 24-hour) in
/// the viewer's zone (here India's, UTC+05:30, set through DevTools), which it names; no browser
/// date or time picker (12-hour in en-US). "2pm" is refused on the page with what to write, and a
/// typed moment reaches the server as that minute in the viewer's zone and comes back in the table
/// as it was typed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_form_takes_the_tables_24_hour_format_in_the_viewers_zone() {
    const OFFSET: i32 = 330;
    let sim = Simulator::new(2, 250);
    let server =
        TestServer::with_options(Box::new(sim), gpudash::Options::new(std::time::Duration::from_millis(250))).await;
    let url = server.url("/");
    let shared = &server;
    with_browser(1400, 1200, |c| async move {
        let server = shared;
        let zone = serde_json::json!({ "timezoneId": "Asia/Kolkata" });
        c.issue_cmd(crate::budgets::Cdp { method: "Emulation.setTimezoneOverride", params: zone })
            .await
            .expect("chromedriver passes DevTools commands");
        c.goto(&url).await.unwrap();
        assert_eq!(crate::browser::js(&c, "return -new Date().getTimezoneOffset()").await, OFFSET);
        eventually(20, "the form with both GPUs", || async {
            (texts(&c, "#reservation-form .reservation-gpu").await.len() == 2).then_some(())
        })
        .await;
        let pickers = "#reservation-form input[type=date], #reservation-form input[type=time], \
            #reservation-form input[type=datetime-local]";
        assert!(c.find_all(Locator::Css(pickers)).await.unwrap().is_empty(), "no browser date or time picker");
        // Filled in as the tables write a moment: "2 Dec 19:35".
        let now = gpudash::telemetry::now_ms();
        let start_text = field_value(&c, "#reservation-form .reservation-start").await;
        let table = |ms: u64| {
            let civil = shared::time_axis::Civil::at(ms, i64::from(OFFSET) * 60_000);
            format!("{} {}", civil.date(), civil.time(false))
        };
        assert!((0..3).any(|k| start_text == table(now - k * 60_000)), "{start_text:?}, not {:?}", table(now));
        // The zone is named once, above the form (and the bars and the table), not again beside the fields.
        assert_eq!(texts(&c, "#reservation-form .reservation-zone").await.concat(), "24-hour");
        let zone = texts(&c, "#reservations .reservations-zone").await.concat();
        assert_eq!(zone, "Times in UTC+05:30", "the zone is named above the form");

        c.find(Locator::Css("#reservation-form input[type=checkbox][value='1']")).await.unwrap().click().await.unwrap();
        type_into(&c, "#reservation-form .reservation-start", "2pm").await;
        c.find(Locator::Css(".reservation-submit")).await.unwrap().click().await.unwrap();
        let refused = eventually(10, "the form to refuse '2pm'", || async {
            texts(&c, ".reservation-form-error").await.into_iter().next()
        })
        .await;
        assert!(
            refused.contains("\"2pm\"") && refused.contains("24-hour") && refused.contains("UTC+05:30"),
            "{refused}"
        );
        let r: ReservationsResponse = get_json(server, "/api/reservations").await;
        assert!(r.reservations.is_empty(), "nothing sent");

        // Tomorrow 13:00 to 21:30 in India, typed as the table writes it.
        let tomorrow = shared::time_axis::Civil::at(now + shared::time::DAY_MS, i64::from(OFFSET) * 60_000).date();
        let (from, to) = (format!("{tomorrow} 13:00"), format!("{tomorrow} 21:30"));
        type_into(&c, "#reservation-form .reservation-start", &from).await;
        type_into(&c, "#reservation-form .reservation-end", &to).await;
        c.find(Locator::Css(".reservation-submit")).await.unwrap().click().await.unwrap();
        let booked = eventually(10, "the server to hold the reservation", || async {
            let r: ReservationsResponse = get_json(server, "/api/reservations").await;
            r.reservations.into_iter().next()
        })
        .await;
        let day = shared::time::date(now + shared::time::DAY_MS, OFFSET);
        let expected = |hh_mm: &str| shared::time::parse_local_minute(&day, hh_mm, OFFSET).unwrap();
        assert_eq!((booked.start_ms, booked.end_ms), (expected("13:00"), expected("21:30")), "{from} – {to}");
        let row = eventually(10, "the booking's row", || async {
            let from = texts(&c, "tr.reservation-row .reservation-from").await.into_iter().next()?;
            Some((from, texts(&c, "tr.reservation-row .reservation-to").await.concat()))
        })
        .await;
        assert_eq!(row, (from.clone(), to.clone()), "the table writes it as it was typed");

        // Issue 56, item 5: the server's refusal names the booking's moments in its one form
        // ("… UTC"); the page shows them in the viewer's zone, as the table writes them.
        let gpu1 = c.find(Locator::Css("#reservation-form input[type=checkbox][value='1']")).await.unwrap();
        if gpu1.prop("checked").await.unwrap().as_deref() != Some("true") {
            gpu1.click().await.unwrap();
        }
        type_into(&c, "#reservation-form .reservation-start", &from).await;
        type_into(&c, "#reservation-form .reservation-end", &to).await;
        c.find(Locator::Css(".reservation-submit")).await.unwrap().click().await.unwrap();
        let refused = eventually(10, "the server's refusal of the overlapping booking", || async {
            texts(&c, ".reservation-form-error").await.into_iter().find(|t| t.contains("is reserved by"))
        })
        .await;
        let stamp = |ms: u64| shared::time_axis::moment(ms, now, i64::from(OFFSET) * 60_000, false);
        assert!(
            refused.contains(&format!("from {} to {}", stamp(booked.start_ms), stamp(booked.end_ms)))
                && !refused.contains("UTC"),
            "{refused}"
        );
    })
    .await;
    server.stop().await;
}
