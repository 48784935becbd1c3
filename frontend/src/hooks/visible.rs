//! Where an element is, told by the browser's observers rather than read in the
//! middle of a tick: `use_on_screen()` (in the viewport, from an
//! IntersectionObserver) lets charts off screen or on a hidden tab skip redraws;
//! `use_box_size()` (from a ResizeObserver) gives a canvas its CSS size without
//! forcing the browser to lay the page out again at every draw.

use leptos::{html::ElementType, prelude::*};
use send_wrapper::SendWrapper;
use wasm_bindgen::{JsCast, prelude::Closure};
use web_sys::{IntersectionObserver, IntersectionObserverEntry, ResizeObserver, ResizeObserverEntry};

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

/// `target`'s content box in CSS pixels, `(width, height)`: `None` until it is first laid
/// out, then updated whenever it changes (window resized, tab shown, layout moved).
pub fn use_box_size<E>(target: NodeRef<E>) -> ReadSignal<Option<(f64, f64)>>
where
    E: ElementType,
    E::Output: JsCast + Clone + 'static,
{
    let (size, set_size) = signal(None::<(f64, f64)>);
    let callback = Closure::<dyn FnMut(js_sys::Array)>::new(move |entries: js_sys::Array| {
        if let Some(entry) = entries.iter().last().and_then(|e| e.dyn_into::<ResizeObserverEntry>().ok()) {
            let rect = entry.content_rect();
            let measured = Some((rect.width(), rect.height()));
            if size.get_untracked() != measured {
                set_size.set(measured);
            }
        }
    });
    let Ok(observer) = ResizeObserver::new(callback.as_ref().unchecked_ref()) else {
        // No ResizeObserver: measure once, when the element exists.
        Effect::new(move |_| {
            if let Some(element) = target.get() {
                let rect = element.unchecked_ref::<web_sys::Element>().get_bounding_client_rect();
                set_size.set(Some((rect.width(), rect.height())));
            }
        });
        return size;
    };
    let kept = SendWrapper::new((observer.clone(), callback));
    Effect::new(move |_| {
        if let Some(element) = target.get() {
            observer.observe(element.unchecked_ref());
        }
    });
    on_cleanup(move || kept.0.disconnect());
    size
}
