//! `use_on_screen()`: whether an element is in the viewport (and laid out), from
//! an IntersectionObserver, so charts off screen or on a hidden tab skip redraws.

use leptos::{html::ElementType, prelude::*};
use send_wrapper::SendWrapper;
use wasm_bindgen::{JsCast, prelude::Closure};
use web_sys::{IntersectionObserver, IntersectionObserverEntry};

/// True while `target` intersects the viewport; false until the observer first reports
/// (it does once observing starts), always true where there is no IntersectionObserver.
pub fn use_on_screen<E>(target: NodeRef<E>) -> ReadSignal<bool>
where
    E: ElementType,
    E::Output: JsCast + Clone + 'static,
{
    let (on_screen, set_on_screen) = signal(false);
    let callback = Closure::<dyn FnMut(js_sys::Array)>::new(move |entries: js_sys::Array| {
        // The latest entry wins when several queued up.
        if let Some(entry) = entries.iter().last().and_then(|e| e.dyn_into::<IntersectionObserverEntry>().ok()) {
            set_on_screen.set(entry.is_intersecting());
        }
    });
    let Ok(observer) = IntersectionObserver::new(callback.as_ref().unchecked_ref()) else {
        set_on_screen.set(true);
        return on_screen;
    };
    let kept = SendWrapper::new((observer.clone(), callback));
    Effect::new(move |_| {
        if let Some(element) = target.get() {
            observer.observe(element.unchecked_ref());
        }
    });
    on_cleanup(move || kept.0.disconnect());
    on_screen
}
