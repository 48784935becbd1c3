//! Per-host counts (free, busy, held idle, lost, reserved, stale GPUs; owners): what the Fleet
//! page shows of each host before it is opened, so its first answer stays small at any size.

use std::collections::BTreeSet;

use shared::activity::GpuState;
use shared::fleet::{FleetGpu, FleetNode, FleetSummary};

/// Fills each node's counts and owners from `gpus`, and their sums into `summary`.
pub fn tally(nodes: &mut [FleetNode], gpus: &[FleetGpu], summary: &mut FleetSummary) {
    let index: std::collections::HashMap<String, usize> =
        nodes.iter().enumerate().map(|(i, n)| (n.instance.clone(), i)).collect();
    let mut owners: Vec<BTreeSet<String>> = vec![BTreeSet::new(); nodes.len()];
    for node in nodes.iter_mut() {
        (node.gpus, node.free_gpus, node.busy_gpus, node.idle_gpus) = (0, 0, 0, 0);
        (node.lost_gpus, node.reserved_gpus, node.stale_gpus) = (0, 0, 0);
    }
    for gpu in gpus {
        let Some(&i) = index.get(&gpu.instance) else { continue };
        let node = &mut nodes[i];
        node.gpus += 1;
        match gpu.state() {
            GpuState::Lost => node.lost_gpus += 1,
            GpuState::Stale => node.stale_gpus += 1,
            GpuState::Reserved => node.reserved_gpus += 1,
            GpuState::Free => node.free_gpus += 1,
            GpuState::HeldIdle => node.idle_gpus += 1,
            GpuState::Busy | GpuState::InUseUnseen => node.busy_gpus += 1,
        }
        owners[i].extend(gpu.users.iter().flatten().map(|u| u.user.clone()));
    }
    for (node, owners) in nodes.iter_mut().zip(owners) {
        node.owners = owners.into_iter().collect();
    }
    summary.gpus = nodes.iter().map(|n| n.gpus).sum();
    summary.free_gpus = nodes.iter().map(|n| n.free_gpus).sum();
    summary.busy_gpus = nodes.iter().map(|n| n.busy_gpus).sum();
    summary.idle_gpus = nodes.iter().map(|n| n.idle_gpus).sum();
    summary.lost_gpus = nodes.iter().map(|n| n.lost_gpus).sum();
    summary.reserved_gpus = nodes.iter().map(|n| n.reserved_gpus).sum();
    summary.stale_gpus = nodes.iter().map(|n| n.stale_gpus).sum();
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::fleet::FleetUser;

    fn gpu(instance: &str, users: &[&str], util: f64) -> FleetGpu {
        FleetGpu {
            instance: instance.to_owned(),
            hostname: instance.to_owned(),
            gpu: 0,
            uuid: None,
            model: None,
            gpu_util: Some(util),
            memory_used: None,
            memory_total: None,
            temperature_c: None,
            power_w: None,
            users: Some(
                users.iter().map(|u| FleetUser { user: (*u).to_owned(), memory: None, processes: 1 }).collect(),
            ),
            free: users.is_empty(),
            unhealthy: None,
            reserved_by: None,
            stale: false,
            lost: false,
            simulated: false,
        }
    }

    #[test]
    fn each_gpu_counts_once_on_its_host() {
        let mut nodes = vec![
            FleetNode { instance: "a".to_owned(), ..FleetNode::default() },
            FleetNode { instance: "b".to_owned(), ..FleetNode::default() },
        ];
        let reserved = FleetGpu { reserved_by: Some("cy".to_owned()), free: false, ..gpu("b", &[], 0.0) };
        let lost = FleetGpu { lost: true, stale: true, free: false, ..gpu("b", &[], 0.0) };
        let stale = FleetGpu { stale: true, users: None, free: false, ..gpu("b", &[], 0.0) };
        let gpus = [gpu("a", &[], 0.0), gpu("a", &["ana"], 90.0), gpu("a", &["bo", "ana"], 0.0), reserved, lost, stale];
        // The one state type, by the rule the Fleet page's rows use too (`FleetGpu::state`).
        let states: Vec<GpuState> = gpus.iter().map(FleetGpu::state).collect();
        use GpuState::{Busy, Free, HeldIdle, Lost, Reserved, Stale};
        assert_eq!(states, [Free, Busy, HeldIdle, Reserved, Lost, Stale]);
        let mut summary = FleetSummary::default();
        tally(&mut nodes, &gpus, &mut summary);
        let a = &nodes[0];
        assert_eq!((a.gpus, a.free_gpus, a.busy_gpus, a.idle_gpus), (3, 1, 1, 1));
        assert_eq!(a.owners, ["ana", "bo"]);
        let b = &nodes[1];
        assert_eq!((b.gpus, b.reserved_gpus, b.lost_gpus, b.stale_gpus, b.free_gpus), (3, 1, 1, 1, 0));
        assert_eq!((summary.gpus, summary.free_gpus, summary.idle_gpus, summary.reserved_gpus), (6, 1, 1, 1));
    }
}
