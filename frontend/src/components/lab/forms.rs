//! The GPU picker, the "force" switch and one form per experiment, built from
//! the experiment's defaults; a form shows what the reader must fix, the
//! server's refusal as it is, or the plan the server made for the queued run.

use leptos::{ev, prelude::*, task::spawn_local};
use shared::{
    auth::Role,
    lab::{CopyKind, ExperimentKind},
};

use crate::{
    hooks::{lab::Lab, session::Session},
    state::{
        DashboardState,
        lab_form::{self, ExperimentDoc, Field, FieldKind, FieldValue},
    },
};

/// `#lab-device` and `#lab-force`: which GPU the forms run on, and whether to run beside other work.
#[component]
pub fn RunTarget(state: ReadSignal<DashboardState>, device: RwSignal<u32>, force: RwSignal<bool>) -> impl IntoView {
    let devices = Memo::new(move |_| {
        state.with(|s| s.devices.iter().map(|d| (d.info.index, d.info.name.clone())).collect::<Vec<_>>())
    });
    view! {
        <div class="lab-target">
            <label class="lab-target-field">
                <span class="field-label">"GPU"</span>
                <select
                    id="lab-device"
                    on:change=move |ev| device.set(event_target_value(&ev).parse().unwrap_or(0))
                    prop:value=move || device.get().to_string()
                >
                    {move || {
                        let chosen = device.get_untracked();
                        devices
                            .get()
                            .into_iter()
                            .map(|(index, name)| {
                                view! {
                                    <option value=index.to_string() selected=index == chosen>
                                        {format!("GPU {index} — {name}")}
                                    </option>
                                }
                            })
                            .collect_view()
                    }}
                </select>
            </label>
            <label class="lab-force" title="Run even when other processes are computing on the GPU">
                <input id="lab-force" type="checkbox" bind:checked=force />
                " force (run even if other processes compute on this GPU)"
            </label>
        </div>
    }
}

/// `form.lab-form[data-kind]`: one experiment's parameters and its Run button.
#[component]
pub fn ExperimentForm(info: ExperimentDoc, device: RwSignal<u32>, force: RwSignal<bool>) -> impl IntoView {
    let lab = expect_context::<Lab>();
    let session = expect_context::<Session>();
    let kind = info.kind;
    let fields = lab_form::fields(kind, &info.defaults);
    let values: Vec<RwSignal<FieldValue>> = fields.iter().map(|f| RwSignal::new(f.default.clone())).collect();
    let error = RwSignal::new(None::<String>);
    let plan = RwSignal::new(Vec::<String>::new());
    let busy = RwSignal::new(false);
    let may_run = move || session.allows(Role::Operator);

    let submit = {
        let fields = fields.clone();
        let values = values.clone();
        move |ev: ev::SubmitEvent| {
            ev.prevent_default();
            let current: Vec<FieldValue> = values.iter().map(|v| v.get_untracked()).collect();
            let params = match lab_form::params(kind, &fields, &current) {
                Ok(params) => params,
                Err(fault) => {
                    error.set(Some(fault.to_string()));
                    plan.set(Vec::new());
                    return;
                }
            };
            error.set(None);
            busy.set(true);
            let (device, force) = (device.get_untracked(), force.get_untracked());
            spawn_local(async move {
                match lab.submit(device, params, force).await {
                    Ok(run) => {
                        plan.try_set(run.plan.notes);
                    }
                    Err(failure) => {
                        plan.try_set(Vec::new());
                        error.try_set(Some(failure.message.clone()));
                        session.unauthorized(&failure);
                    }
                }
                busy.try_set(false);
            });
        }
    };

    let inputs =
        fields.into_iter().zip(values).map(|(field, value)| view! { <FieldInput kind=kind field=field value=value /> });
    view! {
        <form class="lab-form" data-kind=kind.name() on:submit=submit novalidate=true>
            <h3 class="lab-form-title">{info.title}</h3>
            <p class="lab-form-description">{info.description}</p>
            <div class="lab-fields">{inputs.collect_view()}</div>
            <div class="lab-form-actions">
                <Show
                    when=may_run
                    fallback=|| view! { <span class="role-hint">"Running experiments needs the operator role."</span> }
                >
                    <button type="submit" class="run-button" data-kind=kind.name() disabled=move || busy.get()>
                        {format!("Run {}", kind.name())}
                    </button>
                </Show>
            </div>
            <Show when=move || error.with(Option::is_some)>
                <p class="lab-error" role="alert">{move || error.get().unwrap_or_default()}</p>
            </Show>
            <Show when=move || plan.with(|p| !p.is_empty())>
                <div class="lab-plan">
                    <span class="lab-plan-title">"Queued. The server's plan:"</span>
                    <ul>{move || plan.get().into_iter().map(|note| view! { <li>{note}</li> }).collect_view()}</ul>
                </div>
            </Show>
        </form>
    }
}

/// One parameter: a text box, or checkboxes for a set of names.
#[component]
fn FieldInput(kind: ExperimentKind, field: Field, value: RwSignal<FieldValue>) -> impl IntoView {
    let id = format!("lab-{}-{}", kind.name(), field.name);
    let label = field.label();
    let hint = field.hint();
    let name = field.name.clone();
    let input = match field.kind {
        FieldKind::Choices(choices) => {
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
                // A copy kind's name says little on its own: its label says the path it takes.
                let title = CopyKind::parse(&choice).map(CopyKind::label);
                view! {
                    <label class="lab-choice" title=title>
                        <input type="checkbox" name=name.clone() value=choice.clone() prop:checked=checked on:change=toggle />
                        {choice}
                    </label>
                }
            });
            view! {
                <span class="field-label">{label}</span>
                <span class="lab-choices">{boxes.collect_view()}</span>
            }
            .into_any()
        }
        kind => {
            let text = move || match value.get() {
                FieldValue::Text(t) => t,
                FieldValue::Chosen(_) => String::new(),
            };
            let wide = matches!(kind, FieldKind::CountList | FieldKind::BytesList | FieldKind::Pairs);
            view! {
                <label class="field-label" for=id.clone()>{label}</label>
                <input
                    id=id
                    type="text"
                    class="lab-input"
                    class:lab-input-wide=wide
                    name=name
                    inputmode=if kind == FieldKind::Count { "numeric" } else { "text" }
                    prop:value=text
                    on:input=move |ev| value.set(FieldValue::Text(event_target_value(&ev)))
                />
            }
            .into_any()
        }
    };
    view! {
        <div class="lab-field" data-field=field.name>
            {input}
            {(!hint.is_empty()).then(|| view! { <span class="field-hint">{hint}</span> })}
        </div>
    }
}

/// True when an experiment can be offered on this many GPUs (p2p needs two).
pub fn offered(kind: ExperimentKind, gpus: usize) -> bool {
    kind != ExperimentKind::P2p || gpus >= 2
}
