//! `#reservations`: the GPUs booked now and later, a form to book (operators) and Release for
//! the holder or an admin. Advisory: nothing is enforced on the GPU, and the panel says so.

use leptos::{prelude::*, task::spawn_local};
use shared::auth::Role;
use shared::reservations::{ADVISORY, Reservation, ReservationRequest};

use crate::{
    components::{format, reservation_timeline::BookingTimeline},
    hooks::{reservations::Reservations, session::Session, url::ViewSignals},
    state::DashboardState,
};

const HOUR_MS: f64 = 3_600_000.0;

use format::utc_offset;

/// A moment as the form's fields hold it, in the viewer's zone and the tables' format: "2 Dec 14:05".
fn local_text(ms: f64) -> String {
    format::moment_text(ms.max(0.0) as u64, utc_offset())
}

/// A field's text as ms since the epoch, in the viewer's zone; else the error that says what to write.
fn parse_field(name: &str, text: &str) -> Result<u64, String> {
    let now = js_sys::Date::now();
    format::parse_moment(text, now.max(0.0) as u64, utc_offset()).ok_or_else(|| {
        format!(
            "{name}: \"{}\" is not a day and a 24-hour time: write it as the tables do, such as {} ({})",
            text.trim(),
            local_text(now + HOUR_MS),
            shared::time::zone_name(utc_offset())
        )
    })
}

/// The panel: form, list, and the sentence that nothing is enforced.
#[component]
pub fn ReservationsPanel(state: ReadSignal<DashboardState>) -> impl IntoView {
    let reservations = expect_context::<Reservations>();
    let session = expect_context::<Session>();
    let may_book = move || session.may_change(Role::Operator);
    let me = move || session.me.with(|m| m.as_ref().and_then(|m| m.user.clone()));
    let may_release = move |r: &Reservation| {
        session.may_change(Role::Admin)
            || (session.may_change(Role::Operator) && me().as_deref() == Some(r.user.as_str()))
    };
    let error = RwSignal::new(None::<String>);
    let gpus = Memo::new(move |_| state.with(|s| s.devices.iter().map(|d| d.info.index).collect::<Vec<_>>()));
    let release = move |id: u64| {
        spawn_local(async move {
            match reservations.release(id).await {
                Ok(()) => drop(error.try_set(None)),
                Err(failure) => {
                    session.unauthorized(&failure);
                    error.try_set(Some(failure.message));
                }
            }
        });
    };
    let rows = move || {
        reservations
            .list
            .get()
            .reservations
            .into_iter()
            .map(|r| {
                let id = r.id;
                let releasable = may_release(&r);
                let intruders = if r.intruders.is_empty() {
                    "—".to_owned()
                } else {
                    format!("⚠ PID {}", r.intruders.iter().map(u32::to_string).collect::<Vec<_>>().join(", "))
                };
                view! {
                    <tr class="reservation-row" data-id=id>
                        <td class="reservation-gpus">{format::indexes(&r.devices)}</td>
                        <td class="reservation-user">{r.user.clone()}</td>
                        <td class="reservation-from">{format::stamp(r.start_ms as f64)}</td>
                        <td class="reservation-to">{format::stamp(r.end_ms as f64)}</td>
                        <td class="reservation-note">{r.note.clone()}</td>
                        <td class="reservation-intruders" class:warn=!r.intruders.is_empty()>{intruders}</td>
                        <td>
                            {releasable
                                .then(|| {
                                    view! {
                                        <button type="button" class="small-button reservation-release" on:click=move |_| release(id)>
                                            "Release"
                                        </button>
                                    }
                                })}
                        </td>
                    </tr>
                }
            })
            .collect_view()
    };
    view! {
        <section id="reservations" class="section reservations" aria-labelledby="reservations-title">
            <h2 id="reservations-title" class="section-title">"Reservations"</h2>
            <p class="reservations-advisory">
                {ADVISORY} " They tell the team who plans to use a GPU; they stop no one."
            </p>
            <p class="times-zone reservations-zone">{format::zone_caption()}</p>
            <Show when=may_book>
                <ReservationForm state=state />
            </Show>
            {move || error.get().map(|text| view! { <p class="reservation-error lab-error" role="alert">{text}</p> })}
            <BookingTimeline gpus=gpus />
            <Show
                when=move || !reservations.list.with(|l| l.reservations.is_empty())
                fallback=|| view! { <p class="reservations-none">"No reservations now or to come."</p> }
            >
                <div class="table-scroll">
                    <table class="reservations-table">
                        <thead>
                            <tr>
                                <th scope="col">"GPUs"</th>
                                <th scope="col">"Holder"</th>
                                <th scope="col">"From"</th>
                                <th scope="col">"To"</th>
                                <th scope="col">"Note"</th>
                                <th scope="col" title="Other users' processes on the GPUs now">"Others on it"</th>
                                <th scope="col"></th>
                            </tr>
                        </thead>
                        <tbody>{rows}</tbody>
                    </table>
                </div>
            </Show>
        </section>
    }
}

/// GPUs, start, end and note → `POST /api/reservations`.
#[component]
fn ReservationForm(state: ReadSignal<DashboardState>) -> impl IntoView {
    let reservations = expect_context::<Reservations>();
    let session = expect_context::<Session>();
    let indices = Memo::new(move |_| state.with(|s| s.devices.iter().map(|d| d.info.index).collect::<Vec<_>>()));
    // The view's, so that a GPU card's Reserve can tick its GPU.
    let chosen = use_context::<ViewSignals>().map_or_else(|| RwSignal::new(Vec::<u32>::new()), |v| v.reserve_gpus);
    let now = js_sys::Date::now();
    let (start, end) = (RwSignal::new(local_text(now)), RwSignal::new(local_text(now + 2.0 * HOUR_MS)));
    let note = RwSignal::new(String::new());
    let error = RwSignal::new(None::<String>);
    let working = RwSignal::new(false);
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let times = parse_field("From", &start.get_untracked())
            .and_then(|from| Ok((from, parse_field("To", &end.get_untracked())?)))
            .and_then(|(from, to)| if to > from { Ok((from, to)) } else { Err("To must be after From".to_owned()) });
        let (start_ms, end_ms) = match times {
            Ok(times) => times,
            Err(message) => {
                error.set(Some(message));
                return;
            }
        };
        // A start already past (the form sat open) means now.
        let start_ms = start_ms.max(js_sys::Date::now() as u64);
        let request =
            ReservationRequest { devices: chosen.get_untracked(), start_ms, end_ms, note: note.get_untracked() };
        working.set(true);
        spawn_local(async move {
            match reservations.reserve(request).await {
                Ok(_) => {
                    error.try_set(None);
                    chosen.try_set(Vec::new());
                    note.try_set(String::new());
                }
                Err(failure) => {
                    session.unauthorized(&failure);
                    error.try_set(Some(failure.message));
                }
            }
            working.try_set(false);
        });
    };
    view! {
        <form id="reservation-form" class="reservation-form" on:submit=submit>
            <fieldset class="reservation-gpus">
                <legend>"GPUs"</legend>
                <For each=move || indices.get() key=|i| *i let:index>
                    <label class="reservation-gpu">
                        <input
                            type="checkbox"
                            value=index
                            prop:checked=move || chosen.with(|c| c.contains(&index))
                            on:change=move |ev| {
                                let on = event_target_checked(&ev);
                                chosen.update(|c| {
                                    c.retain(|&i| i != index);
                                    if on {
                                        c.push(index);
                                        shared::order::sort(c);
                                    }
                                });
                            }
                        />
                        {format!("GPU {index}")}
                    </label>
                </For>
            </fieldset>
            <label>
                "From "
                <input type="text" class="reservation-start" size="13" maxlength="40" placeholder="2 Dec 14:00"
                    aria-label="Start: day, month and 24-hour time" prop:value=move || start.get()
                    on:input=move |ev| start.set(event_target_value(&ev)) />
            </label>
            <label>
                "To "
                <input type="text" class="reservation-end" size="13" maxlength="40" placeholder="2 Dec 16:00"
                    aria-label="End: day, month and 24-hour time" prop:value=move || end.get()
                    on:input=move |ev| end.set(event_target_value(&ev)) />
            </label>
            // The zone is named once, above the form, for the form, the bars and the table alike.
            <span class="reservation-zone">"24-hour"</span>
            <input
                type="text"
                class="reservation-note-input"
                placeholder="note, e.g. fine-tuning"
                maxlength="200"
                prop:value=move || note.get()
                on:input=move |ev| note.set(event_target_value(&ev))
            />
            <button type="submit" class="small-button reservation-submit"
                disabled=move || working.get() || chosen.with(Vec::is_empty)>
                "Reserve"
            </button>
            {move || error.get().map(|text| view! { <span class="reservation-form-error lab-error" role="alert">{text}</span> })}
        </form>
    }
}
