//! The GPU picker, the "force" switch and one form per experiment, built from
//! the fields the server sends with their values from the experiment's defaults; a form shows what the reader must fix, the
//! server's refusal as it is, or the plan the server made for the queued run,
//! and the experiment in PyTorch.

use leptos::{ev, prelude::*, task::spawn_local};
use serde_json::Value;
use shared::{
    auth::Role,
    lab::{ExperimentKind, Input},
};

use super::pytorch::InPyTorch;
use crate::{
    hooks::{lab::Lab, session::Session},
    state::{
        lab_form::{self, ExperimentDoc, Field, FieldValue},
        lab_target::{GpuChoice, PickedGpu, run_question},
    },
};

/// `#lab-device` and `#lab-force`: which GPU the forms run on (each option says whether it is free, busy,
/// held idle, reserved or lost, and by whom), and whether to run beside other work.
#[component]
pub fn RunTarget(choices: Memo<Vec<GpuChoice>>, picked: RwSignal<PickedGpu>, force: RwSignal<bool>) -> impl IntoView {
    view! {
        <div class="lab-target">
            <label class="lab-target-field">
                <span class="field-label">"GPU"</span>
                <select
                    id="lab-device"
                    on:change=move |ev| {
                        picked.set(PickedGpu::by_reader(event_target_value(&ev).parse().unwrap_or(0)));
                    }
                    // Picking the GPU already shown fires no change, yet it is the reader's choice too.
                    on:click=move |_| picked.update(|p| *p = PickedGpu::by_reader(p.index()))
                    prop:value=move || picked.get().index().to_string()
                >
                    // Keyed by GPU: at each tick only the options whose words changed are written
                    // (the whole list was built again at every tick, the tab shown or not).
                    <For each=move || choices.with(|c| c.iter().map(|c| c.index).collect::<Vec<_>>())
                        key=|index| *index let:index>
                        <ChoiceOption choices=choices index=index selected=index == picked.get_untracked().index() />
                    </For>
                </select>
            </label>
            <label class="lab-force" title="Run even when other processes are computing on the GPU">
                <input id="lab-force" type="checkbox" bind:checked=force />
                " force (run even if other processes compute on this GPU)"
            </label>
        </div>
    }
}

/// One `option` of `#lab-device`: its label and `data-state` follow the GPU's choice.
#[component]
fn ChoiceOption(choices: Memo<Vec<GpuChoice>>, index: u32, selected: bool) -> impl IntoView {
    let choice = Memo::new(move |_| choices.with(|c| c.iter().find(|c| c.index == index).cloned()));
    view! {
        <option value=index.to_string() data-state=move || choice.with(|c| c.as_ref().map_or("", |c| c.state))
            selected=selected>
            {move || choice.with(|c| c.as_ref().map(|c| c.label.clone()).unwrap_or_default())}
        </option>
    }
}

/// `form.lab-form[data-kind]`: one experiment's parameters and its Run button; an experiment that cannot
/// run here (collectives without NCCL) is greyed out with the server's reason (`.lab-unavailable-reason`)
/// and cannot be started. A run on several GPUs (p2p, collectives) or a forced one is first put to the
/// server (`POST /api/runs/check`): its refusal is shown as it is, else the form asks (`.lab-confirm`),
/// naming each GPU it takes and the people whose work a forced run goes beside ([`run_question`]).
/// Running on the picker's GPU makes it the reader's choice: the lab's own memory pool, which the run
/// leaves on that GPU, must not move the default to another GPU for the next run. The queued run's view
/// is scrolled into sight.
#[component]
pub fn ExperimentForm(
    info: ExperimentDoc,
    choices: Memo<Vec<GpuChoice>>,
    picked: RwSignal<PickedGpu>,
    force: RwSignal<bool>,
) -> impl IntoView {
    let lab = expect_context::<Lab>();
    let session = expect_context::<Session>();
    let kind = info.kind.clone();
    let unavailable = info.unavailable.clone();
    let off = unavailable.is_some();
    let multi_gpu = info.multi_gpu;
    let fields = lab_form::fields(&info.fields, &info.defaults);
    let values: Vec<RwSignal<FieldValue>> = fields.iter().map(|f| RwSignal::new(f.default.clone())).collect();
    let error = RwSignal::new(None::<String>);
    let plan = RwSignal::new(Vec::<String>::new());
    let busy = RwSignal::new(false);
    // The question asked before a run on several GPUs, and the parameters it would run with.
    let confirm = RwSignal::new(None::<(String, Value)>);
    let may_run = move || session.may_change(Role::Operator);

    let send = move |params: Value| {
        busy.set(true);
        let (device, force) = (picked.get_untracked().index(), force.get_untracked());
        picked.set(PickedGpu::by_reader(device));
        spawn_local(async move {
            match lab.submit(device, params, force).await {
                Ok(run) => {
                    plan.try_set(run.plan.notes);
                    reveal_run();
                }
                Err(failure) => {
                    plan.try_set(Vec::new());
                    error.try_set(Some(failure.message.clone()));
                    session.unauthorized(&failure);
                }
            }
            busy.try_set(false);
        });
    };
    let submit = {
        let kind = kind.clone();
        let fields = fields.clone();
        let values = values.clone();
        move |ev: ev::SubmitEvent| {
            ev.prevent_default();
            let current: Vec<FieldValue> = values.iter().map(|v| v.get_untracked()).collect();
            let params = match lab_form::params(&kind, &fields, &current) {
                Ok(params) => params,
                Err(fault) => {
                    error.set(Some(fault.to_string()));
                    plan.set(Vec::new());
                    return;
                }
            };
            error.set(None);
            let forced = force.get_untracked();
            if !multi_gpu && !forced {
                send(params);
                return;
            }
            // Put to the server first: a refusal is shown instead of a question it would end in.
            busy.set(true);
            let device = picked.get_untracked().index();
            spawn_local(async move {
                match lab.check(device, params.clone(), forced).await {
                    // `send` keeps the form busy until the run is queued.
                    Ok(check) => match choices.with_untracked(|c| run_question(c, &check.devices, forced)) {
                        Some(question) => {
                            confirm.try_set(Some((question, params)));
                            busy.try_set(false);
                        }
                        None => send(params),
                    },
                    Err(failure) => {
                        plan.try_set(Vec::new());
                        error.try_set(Some(failure.message.clone()));
                        session.unauthorized(&failure);
                        busy.try_set(false);
                    }
                }
            });
        }
    };
    let confirmed = move |_| {
        if let Some((_, params)) = confirm.get_untracked() {
            confirm.set(None);
            send(params);
        }
    };

    let inputs = fields
        .into_iter()
        .zip(values)
        .map(|(field, value)| view! { <FieldInput kind=kind.clone() field=field value=value disabled=off /> });
    let name = kind.name().to_owned();
    let run_name = name.clone();
    view! {
        <form
            class="lab-form"
            class:lab-form-unavailable=off
            aria-disabled=off.then_some("true")
            data-kind=name
            on:submit=submit
            novalidate=true
        >
            <h3 class="lab-form-title">{info.title}</h3>
            <p class="lab-form-description">{info.description}</p>
            {unavailable.map(|reason| view! {
                <p class="lab-unavailable-reason" role="note">
                    <strong>"Not available on this server: "</strong>
                    {reason}
                </p>
            })}
            <div class="lab-fields">{inputs.collect_view()}</div>
            <div class="lab-form-actions">
                <Show
                    when=may_run
                    fallback=move || view! {
                        <span class="role-hint">
                            {if session.read_only() {
                                "This dashboard is read-only: experiments are turned off."
                            } else {
                                "Running experiments needs the operator role."
                            }}
                        </span>
                    }
                >
                    <button type="submit" class="run-button" data-kind=run_name.clone() disabled=move || off || busy.get() || confirm.with(Option::is_some)>
                        {format!("Run {run_name}")}
                    </button>
                </Show>
            </div>
            <Show when=move || confirm.with(Option::is_some)>
                <div class="lab-confirm" role="alertdialog" aria-label="Run on several GPUs?">
                    <p class="lab-confirm-question">{move || confirm.with(|c| c.as_ref().map(|(q, _)| q.clone()))}</p>
                    <button type="button" class="confirm-run" on:click=confirmed>"Run on these GPUs"</button>
                    <button type="button" class="cancel-run" on:click=move |_| confirm.set(None)>"Cancel"</button>
                </div>
            </Show>
            <Show when=move || error.with(Option::is_some)>
                <p class="lab-error" role="alert">{move || error.get().unwrap_or_default()}</p>
            </Show>
            <Show when=move || plan.with(|p| !p.is_empty())>
                <div class="lab-plan">
                    <span class="lab-plan-title">"Queued. The server's plan:"</span>
                    <ul>{move || plan.get().into_iter().map(|note| view! { <li>{note}</li> }).collect_view()}</ul>
                </div>
            </Show>
            <InPyTorch kind=kind />
        </form>
    }
}

/// One parameter: a text box, checkboxes for a set of names, a drop-down for one of them, or a switch.
#[component]
fn FieldInput(kind: ExperimentKind, field: Field, value: RwSignal<FieldValue>, disabled: bool) -> impl IntoView {
    let id = format!("lab-{}-{}", kind.name(), field.spec.name);
    let label = field.spec.label.clone();
    let hint = field.spec.hint.clone();
    let name = field.spec.name.clone();
    let input = match field.spec.input {
        Input::Choices { choices } => {
            let boxes = choices.into_iter().enumerate().map(|(i, choice)| {
                let checked = move || matches!(value.get(), FieldValue::Chosen(c) if c.get(i).copied().unwrap_or(false));
                let toggle = move |ev: ev::Event| {
                    let on = event_target_checked(&ev);
                    value.update(|v| {
                        if let FieldValue::Chosen(c) = v
                            && let Some(flag) = c.get_mut(i)
                        {
                            *flag = on;
                        }
                    });
                };
                // A name that says little on its own (a copy kind) has a title that says what it is.
                let title = (!choice.title.is_empty()).then_some(choice.title);
                view! {
                    <label class="lab-choice" title=title>
                        <input type="checkbox" name=name.clone() value=choice.name.clone() disabled=disabled prop:checked=checked on:change=toggle />
                        {choice.name}
                    </label>
                }
            });
            view! {
                <span class="field-label">{label}</span>
                <span class="lab-choices">{boxes.collect_view()}</span>
            }
            .into_any()
        }
        Input::OneOf { choices } => {
            let current = match value.get_untracked() {
                FieldValue::Text(t) => t,
                FieldValue::Chosen(_) => String::new(),
            };
            let options = choices.into_iter().map(|choice| {
                let selected = choice == current;
                let text = choice.clone();
                view! { <option value=choice selected=selected>{text}</option> }
            });
            view! {
                <label class="field-label" for=id.clone()>{label}</label>
                <select
                    id=id
                    class="lab-input"
                    name=name
                    disabled=disabled
                    on:change=move |ev| value.set(FieldValue::Text(event_target_value(&ev)))
                >
                    {options.collect_view()}
                </select>
            }
            .into_any()
        }
        Input::Switch => {
            let checked = move || matches!(value.get(), FieldValue::Chosen(c) if c.first().copied().unwrap_or(false));
            let for_id = id.clone();
            view! {
                <label class="lab-choice lab-switch" for=for_id>
                    <input
                        id=id
                        type="checkbox"
                        name=name
                        disabled=disabled
                        prop:checked=checked
                        on:change=move |ev| value.set(FieldValue::Chosen(vec![event_target_checked(&ev)]))
                    />
                    {label}
                </label>
            }
            .into_any()
        }
        input => {
            let text = move || match value.get() {
                FieldValue::Text(t) => t,
                FieldValue::Chosen(_) => String::new(),
            };
            let wide = matches!(input, Input::CountList { .. } | Input::BytesList | Input::Pairs);
            view! {
                <label class="field-label" for=id.clone()>{label}</label>
                <input
                    id=id
                    type="text"
                    class="lab-input"
                    class:lab-input-wide=wide
                    name=name
                    disabled=disabled
                    inputmode=if input == Input::Count { "numeric" } else { "text" }
                    prop:value=text
                    on:input=move |ev| value.set(FieldValue::Text(event_target_value(&ev)))
                />
            }
            .into_any()
        }
    };
    view! {
        <div class="lab-field" data-field=field.spec.name>
            {input}
            {(!hint.is_empty()).then(|| view! { <span class="field-hint">{hint}</span> })}
        </div>
    }
}

/// Brings the shown run (`#lab-run`) into sight once it is drawn, where the page is scrolled down to a form
/// and the run's view sits above it or beside it off-screen (one column on a phone).
fn reveal_run() {
    request_animation_frame(|| {
        let Some(view) = document().get_element_by_id("lab-run") else { return };
        let rect = view.get_bounding_client_rect();
        let height = window().inner_height().ok().and_then(|h| h.as_f64()).unwrap_or(f64::MAX);
        if rect.top() < 0.0 || rect.top() > height - 80.0 {
            view.scroll_into_view();
        }
    });
}
