//! `use_reservations()`: the GPUs booked now and later (`GET /api/reservations`), reloaded every
//! 5 s while the Dashboard or the Lab is shown (one poll, provided by `app.rs`), booking and
//! releasing. Reservations are advisory.

use std::time::Duration;

use leptos::{logging, prelude::*, task::spawn_local};
use shared::reservations::{Reservation, ReservationRequest, ReservationsResponse};

use super::{
    api::{ApiFailure, delete, get_json, post_json},
    poll::use_poll,
};

/// How often the list is reloaded while it is shown.
const PERIOD: Duration = Duration::from_secs(5);

/// The reservations as last listed, and the server's clock then.
#[derive(Debug, Clone, Copy)]
pub struct Reservations {
    pub list: RwSignal<ReservationsResponse>,
    pub error: RwSignal<Option<String>>,
}

/// Starts reloading the list while `shown` holds.
pub fn use_reservations(shown: Memo<bool>) -> Reservations {
    let reservations =
        Reservations { list: RwSignal::new(ReservationsResponse::default()), error: RwSignal::new(None) };
    use_poll(shown, PERIOD, move || spawn_local(reservations.reload()));
    reservations
}

impl Reservations {
    pub async fn reload(self) {
        match get_json::<ReservationsResponse>("/api/reservations").await {
            Ok(list) => {
                self.list.try_set(list);
                self.error.try_set(None);
            }
            Err(failure) => {
                logging::warn!("gpudash: /api/reservations: {}", failure.message);
                self.error.try_set(Some(failure.message));
            }
        }
    }

    /// `POST /api/reservations`, then a reload; a refusal (409 names the holder) comes back as is.
    pub async fn reserve(self, request: ReservationRequest) -> Result<Reservation, ApiFailure> {
        let body = serde_json::to_value(&request).map_err(|e| ApiFailure { status: 0, message: e.to_string() })?;
        let made = post_json::<Reservation>("/api/reservations", Some(&body)).await?;
        self.reload().await;
        Ok(made)
    }

    /// `DELETE /api/reservations/{id}`, then a reload.
    pub async fn release(self, id: u64) -> Result<(), ApiFailure> {
        delete(&format!("/api/reservations/{id}")).await?;
        self.reload().await;
        Ok(())
    }

    /// The reservation in force on GPU `index` now, by the server's clock at the last reload.
    pub fn holder_of(self, index: u32) -> Option<Reservation> {
        self.list.with(|l| shared::reservations::holder(&l.reservations, index, l.now_ms).cloned())
    }
}
