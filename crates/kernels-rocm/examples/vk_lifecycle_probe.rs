//! vk_lifecycle_probe: what one Vulkan create/destroy cycle leaves behind, on the adapter the
//! loader finds. A diagnostic for the ash tier's first NVIDIA run (docs/VULKAN.md, "Why the
//! first NVIDIA run failed"): there, after about 30 backends had each loaded libvulkan,
//! created an instance and a device, and destroyed them again, `vkCreateInstance` failed
//! with ERROR_INCOMPATIBLE_DRIVER for the rest of the process.
//!
//! Usage: vk_lifecycle_probe <mode> [cycles]   (cycles: 64 by default)
//! - `reload`: per cycle `Entry::load` + instance + device, all destroyed and the loader
//!   unloaded (what kernels-rocm did per backend before the fix);
//! - `instance`: one loader for the process, an instance + device per cycle;
//! - `device`: one loader and one instance, a device per cycle (what the tier does now).
//!
//! Each cycle prints the open file descriptors, the resident set and the mapped objects of
//! the process; the first failure is printed with the Vulkan result, and the probe stops.

use ash::vk;

fn count_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// Distinct shared objects mapped into the process (loaded libraries).
fn mapped_libs() -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut libs: Vec<&str> = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| p.contains(".so"))
        .collect();
    libs.sort_unstable();
    libs.dedup();
    libs.len()
}

fn instance(entry: &ash::Entry) -> Result<ash::Instance, String> {
    let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_1);
    let info = vk::InstanceCreateInfo::default().application_info(&app);
    // SAFETY: `info` and what it points to live through the call.
    unsafe { entry.create_instance(&info, None) }.map_err(|e| format!("vkCreateInstance: {e:?}"))
}

/// A device on the first adapter with a compute queue, destroyed again.
fn device_cycle(instance: &ash::Instance) -> Result<String, String> {
    // SAFETY: queries and create/destroy on a live instance; every info lives through its
    // call, and the device is destroyed before returning.
    unsafe {
        let phys = instance
            .enumerate_physical_devices()
            .map_err(|e| format!("vkEnumeratePhysicalDevices: {e:?}"))?;
        let want = std::env::var("TESSERA_VK_ADAPTER")
            .unwrap_or_default()
            .to_lowercase();
        let pick = phys
            .iter()
            .copied()
            .find(|&p| {
                let props = instance.get_physical_device_properties(p);
                let name = props
                    .device_name_as_c_str()
                    .map(|c| c.to_string_lossy().to_lowercase())
                    .unwrap_or_default();
                name.contains(&want)
            })
            .ok_or("no adapter")?;
        let name = instance
            .get_physical_device_properties(pick)
            .device_name_as_c_str()
            .map(|c| c.to_string_lossy().into_owned())
            .unwrap_or_default();
        let family = instance
            .get_physical_device_queue_family_properties(pick)
            .iter()
            .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
            .ok_or("no compute queue")? as u32;
        let prio = [1.0f32];
        let q = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(family)
            .queue_priorities(&prio)];
        let dci = vk::DeviceCreateInfo::default().queue_create_infos(&q);
        let dev = instance
            .create_device(pick, &dci, None)
            .map_err(|e| format!("vkCreateDevice: {e:?}"))?;
        dev.destroy_device(None);
        Ok(name)
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "reload".into());
    let cycles: usize = args.next().and_then(|c| c.parse().ok()).unwrap_or(64);
    println!(
        "mode {mode}, {cycles} cycles; start: fds {}, rss {} KiB, libs {}",
        count_fds(),
        rss_kib(),
        mapped_libs()
    );
    // SAFETY: loading libvulkan runs its initialisers; the entry outlives what it creates.
    let load = || unsafe { ash::Entry::load() }.map_err(|e| format!("Entry::load: {e}"));
    let keep_entry = match mode.as_str() {
        "reload" => None,
        "instance" | "device" => Some(load().unwrap_or_else(|e| panic!("{e}"))),
        other => panic!("unknown mode {other} (reload, instance, device)"),
    };
    let keep_instance = if mode == "device" {
        keep_entry
            .as_ref()
            .map(|e| instance(e).unwrap_or_else(|e| panic!("{e}")))
    } else {
        None
    };
    for k in 0..cycles {
        let step = || -> Result<String, String> {
            if let Some(i) = &keep_instance {
                return device_cycle(i);
            }
            let fresh;
            let entry = match &keep_entry {
                Some(e) => e,
                None => {
                    fresh = load()?;
                    &fresh
                }
            };
            let i = instance(entry)?;
            let r = device_cycle(&i);
            // SAFETY: nothing created from `i` is alive (device_cycle destroyed its device).
            unsafe { i.destroy_instance(None) };
            r
        };
        match step() {
            Ok(name) => println!(
                "cycle {k}: ok ({name}); fds {}, rss {} KiB, libs {}",
                count_fds(),
                rss_kib(),
                mapped_libs()
            ),
            Err(e) => {
                println!(
                    "cycle {k}: FAILED {e}; fds {}, rss {} KiB, libs {}",
                    count_fds(),
                    rss_kib(),
                    mapped_libs()
                );
                std::process::exit(2);
            }
        }
    }
    println!("all {cycles} cycles ok");
}
