//! The Vulkan device: loader, instance, adapter choice, subgroup (wave) size, the one
//! descriptor-set and pipeline layout every kernel shares, the pipeline cache, buffers and
//! queue submission.
//!
//! Everything here is reached through [`Context`] (an `Arc` of the device), so buffers and
//! tensors keep the device alive and are destroyed before it. Without a loader or an ICD
//! [`Context::new`] returns [`VulkanError::Unavailable`] saying which; nothing panics.
//!
//! The loader (libvulkan) and the `VkInstance` are opened once per process and kept until
//! it exits ([`instances_created`] counts them): every [`Context`] is a device of that one
//! instance. Loading the loader, creating an instance and destroying both again for each
//! backend is what broke the tier's first NVIDIA run: after about 30 such cycles in one
//! process, NVIDIA's ICD refused `vkCreateInstance` (ERROR_INCOMPATIBLE_DRIVER) for every
//! later test (docs/VULKAN.md, "Why the first NVIDIA run failed").
//!
//! Adapter choice: `TESSERA_VK_ADAPTER=<substring>` (matched case-insensitively against
//! `"<device name> <driver name>"`) picks one; otherwise a discrete GPU beats an integrated one,
//! which beats a virtual one, which beats a CPU (lavapipe).

use crate::error::VulkanError;
use crate::pipeline_stats::{self, PipelineStatistic};
use ash::vk;
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Bytes of the `Params` push-constant block every kernel reads
/// (`kernels_metal::kernels::Params`; `cargo xtask shaders` checks every shader declares it).
pub const PARAMS_BYTES: u32 = 32;
/// Storage buffers of group 0: weights, scales, x, y.
pub const BINDINGS: u32 = 4;

pub use kernels_metal::kernels::Params;

/// Whether the subgroup variant of a kernel (`<name>.subgroup.wgsl`) may be used.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SubgroupPolicy {
    /// Where the device reports subgroup arithmetic in compute shaders.
    Auto,
    /// Never: always the workgroup shared-memory kernels.
    Off,
}

/// Which subgroup (wave) size to ask the driver for.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum WavePolicy {
    /// wave32 where the driver lets us choose and 32 is in range (RDNA); otherwise whatever
    /// the device runs (the only size on NVIDIA (32), GCN/CDNA (64) and lavapipe (8)).
    Auto,
    /// Exactly this size; refused (Unavailable) when the driver cannot guarantee it.
    Size(u32),
    /// Never ask: the driver's default.
    DriverDefault,
}

/// How the backend picks its device and kernels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Case-insensitive substring of `"<device name> <driver name>"`; `None`: best ranked.
    pub adapter: Option<String>,
    pub subgroups: SubgroupPolicy,
    pub wave: WavePolicy,
    /// Also enable VK_EXT_robustness2's robustBufferAccess2 where offered, as wgpu 30 does
    /// (`TESSERA_VK_ROBUST=1`; docs/VULKAN.md). Off by default. robustBufferAccess itself
    /// is always on: the kernels' storage-buffer accesses are unchecked in the SPIR-V and
    /// rely on it (build/shaders.rs `spirv_bounds`), and a device without it is unavailable.
    pub robust_buffer_access2: bool,
    /// Ask the driver for each pipeline's statistics (register count and the like) through
    /// VK_KHR_pipeline_executable_properties where the device offers it
    /// (`TESSERA_VK_PIPELINE_STATS=1`; [`Context::pipeline_statistics`]). Off by default.
    pub pipeline_statistics: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            adapter: None,
            subgroups: SubgroupPolicy::Auto,
            wave: WavePolicy::Auto,
            robust_buffer_access2: false,
            pipeline_statistics: false,
        }
    }
}

impl Options {
    /// `TESSERA_VK_ADAPTER` (substring), `TESSERA_VK_SUBGROUPS` (`0`/`off` or `auto`),
    /// `TESSERA_VK_WAVE` (`auto`, `default`, or a size such as `32` / `64`),
    /// `TESSERA_VK_ROBUST` (`1`: [`Options::robust_buffer_access2`]),
    /// `TESSERA_VK_PIPELINE_STATS` (`1`: [`Options::pipeline_statistics`]).
    pub fn from_env() -> Result<Options, VulkanError> {
        let mut o = Options::default();
        let bad = |var: &str, v: &str| VulkanError::Unavailable {
            why: format!("{var}={v:?} is not understood"),
        };
        if let Ok(a) = std::env::var("TESSERA_VK_ADAPTER")
            && !a.trim().is_empty()
        {
            o.adapter = Some(a.trim().to_string());
        }
        if let Ok(v) = std::env::var("TESSERA_VK_SUBGROUPS") {
            o.subgroups = match v.trim() {
                "0" | "off" => SubgroupPolicy::Off,
                "" | "1" | "auto" => SubgroupPolicy::Auto,
                other => return Err(bad("TESSERA_VK_SUBGROUPS", other)),
            };
        }
        if let Ok(v) = std::env::var("TESSERA_VK_WAVE") {
            o.wave = match v.trim() {
                "" | "auto" => WavePolicy::Auto,
                "default" => WavePolicy::DriverDefault,
                n => WavePolicy::Size(n.parse().map_err(|_| bad("TESSERA_VK_WAVE", n))?),
            };
        }
        o.robust_buffer_access2 = std::env::var("TESSERA_VK_ROBUST").as_deref() == Ok("1");
        o.pipeline_statistics = std::env::var("TESSERA_VK_PIPELINE_STATS").as_deref() == Ok("1");
        Ok(o)
    }
}

/// How the subgroup size the kernels run with was decided.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum WaveSource {
    /// Asked for through `VkPipelineShaderStageRequiredSubgroupSizeCreateInfo`.
    Required,
    /// The device has a single size (min == max), so there was nothing to choose.
    Fixed,
    /// The driver may pick any size in `min..=max` (no control offered, or policy said so);
    /// `size` is the device's reported default.
    DriverDefault,
}

/// The subgroup (wave) size kernels run with, and why.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Wave {
    pub size: u32,
    pub source: WaveSource,
}

impl std::fmt::Display for Wave {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = match self.source {
            WaveSource::Required => "required via subgroup size control",
            WaveSource::Fixed => "the device's only size",
            WaveSource::DriverDefault => "driver default, not pinned",
        };
        write!(f, "wave{} ({how})", self.size)
    }
}

/// What was found about the chosen device.
#[derive(Clone, Debug, PartialEq)]
pub struct AdapterInfo {
    pub name: String,
    /// `VkPhysicalDeviceDriverProperties::driverName` (Vulkan 1.2+), e.g. "llvmpipe",
    /// "NVIDIA", "radv"; empty before 1.2.
    pub driver: String,
    pub driver_info: String,
    pub device_type: String,
    pub vendor_id: u32,
    /// (major, minor, patch) of the device's Vulkan.
    pub api_version: (u32, u32, u32),
    pub subgroup_size: u32,
    pub subgroup_min: u32,
    pub subgroup_max: u32,
    /// Subgroup arithmetic (subgroupAdd) in compute shaders.
    pub subgroup_arithmetic: bool,
    /// VK_EXT_subgroup_size_control (core in 1.3) with compute in its required stages.
    pub size_control: bool,
    pub full_subgroups: bool,
    pub wave: Wave,
    /// Whether the kernels use their `.subgroup.wgsl` variants.
    pub use_subgroups: bool,
    /// shaderIntegerDotProduct (VK_KHR_shader_integer_dot_product, core in 1.3) is enabled:
    /// gemv_int_row's `dot4I8Packed` compiles to OpSDot, and int4-row at S = 1 may take
    /// packed int8 activations (kernels_metal::kernels::int8_activations).
    pub integer_dot_product: bool,
    pub max_storage_buffer_range: u32,
    pub max_workgroup_count: [u32; 3],
    /// Nanoseconds per timestamp tick; `None` when the queue cannot time.
    pub timestamp_period: Option<f32>,
    /// Other adapters the loader listed (name, driver), for messages.
    pub others: Vec<String>,
}

impl AdapterInfo {
    /// One line for logs and the test matrix: "llvmpipe (...) [llvmpipe, Vulkan 1.3.255]".
    pub fn summary(&self) -> String {
        format!(
            "{} [{}, {}, Vulkan {}.{}.{}, {}, subgroups {}]",
            self.name,
            if self.driver.is_empty() {
                "driver ?"
            } else {
                &self.driver
            },
            self.device_type,
            self.api_version.0,
            self.api_version.1,
            self.api_version.2,
            self.wave,
            if self.use_subgroups {
                "on"
            } else {
                "off (shared memory)"
            }
        )
    }

    /// Whether this is Mesa's CPU driver (lavapipe / llvmpipe).
    pub fn is_lavapipe(&self) -> bool {
        let n = format!("{} {}", self.name, self.driver).to_lowercase();
        n.contains("llvmpipe") || n.contains("lavapipe")
    }
}

/// Counters that let tests check objects are created once and reused.
#[derive(Default, Debug)]
pub struct Stats {
    pub pipelines_created: AtomicUsize,
    pub descriptor_sets_allocated: AtomicUsize,
    pub command_buffers_recorded: AtomicUsize,
    pub submissions: AtomicUsize,
}

/// The device and everything that lives as long as it.
pub(crate) struct Shared {
    pub(crate) device: ash::Device,
    queue: Mutex<vk::Queue>,
    pub(crate) queue_family: u32,
    memory: vk::PhysicalDeviceMemoryProperties,
    pub(crate) info: AdapterInfo,
    pipeline_cache: vk::PipelineCache,
    pub(crate) set_layout: vk::DescriptorSetLayout,
    pub(crate) pipeline_layout: vk::PipelineLayout,
    pipelines: Mutex<HashMap<String, vk::Pipeline>>,
    pub(crate) stats: Stats,
    /// Loaded when [`Options::pipeline_statistics`] was asked for and the device offers it.
    pipeline_exec: Option<ash::khr::pipeline_executable_properties::Device>,
    /// What the driver reported for each pipeline created, in creation order.
    pipeline_statistics: Mutex<Vec<(String, Vec<PipelineStatistic>)>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: `Shared` is dropped when the last `Arc` goes, so no buffer, tensor or
        // command buffer of this device is alive; waiting idle first makes destroying the
        // pipelines, layouts, cache and device (children before parents) legal. The
        // instance is the process's and stays.
        unsafe {
            let _ = self.device.device_wait_idle();
            for (_, p) in self
                .pipelines
                .get_mut()
                .unwrap_or_else(|p| p.into_inner())
                .drain()
            {
                self.device.destroy_pipeline(p, None);
            }
            self.device
                .destroy_pipeline_layout(self.pipeline_layout, None);
            self.device
                .destroy_descriptor_set_layout(self.set_layout, None);
            self.device
                .destroy_pipeline_cache(self.pipeline_cache, None);
            self.device.destroy_device(None);
        }
    }
}

fn unavailable(why: impl Into<String>) -> VulkanError {
    VulkanError::Unavailable { why: why.into() }
}

fn version(v: u32) -> (u32, u32, u32) {
    (
        vk::api_version_major(v),
        vk::api_version_minor(v),
        vk::api_version_patch(v),
    )
}

/// A driver's fixed-size string (empty when it has no NUL).
pub(crate) fn c_name(s: Result<&CStr, std::ffi::FromBytesUntilNulError>) -> String {
    s.map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn type_name(t: vk::PhysicalDeviceType) -> &'static str {
    match t {
        vk::PhysicalDeviceType::DISCRETE_GPU => "discrete GPU",
        vk::PhysicalDeviceType::INTEGRATED_GPU => "integrated GPU",
        vk::PhysicalDeviceType::VIRTUAL_GPU => "virtual GPU",
        vk::PhysicalDeviceType::CPU => "CPU",
        _ => "other",
    }
}

fn type_rank(t: vk::PhysicalDeviceType) -> u32 {
    match t {
        vk::PhysicalDeviceType::DISCRETE_GPU => 4,
        vk::PhysicalDeviceType::INTEGRATED_GPU => 3,
        vk::PhysicalDeviceType::VIRTUAL_GPU => 2,
        vk::PhysicalDeviceType::CPU => 1,
        _ => 0,
    }
}

/// One physical device as the selection sees it.
struct Candidate {
    physical: vk::PhysicalDevice,
    props: vk::PhysicalDeviceProperties,
    name: String,
    driver: String,
    driver_info: String,
    queue_family: Option<u32>,
    timestamp_bits: u32,
    extensions: Vec<String>,
}

impl Candidate {
    fn label(&self) -> String {
        format!("{} {}", self.name, self.driver)
    }
    fn api(&self) -> (u32, u32, u32) {
        version(self.props.api_version)
    }
    fn has_extension(&self, name: &CStr) -> bool {
        let n = name.to_string_lossy();
        self.extensions.iter().any(|e| *e == n)
    }
    fn has_size_control(&self) -> bool {
        self.api() >= (1, 3, 0) || self.has_extension(ash::ext::subgroup_size_control::NAME)
    }
}

/// Reads what the selection needs of `physical`.
///
/// # Safety
/// `physical` must come from `instance`, which must be a Vulkan >= 1.1 instance.
unsafe fn describe(instance: &ash::Instance, physical: vk::PhysicalDevice) -> Candidate {
    // SAFETY: per the function contract; every out-structure lives through the call.
    unsafe {
        let props = instance.get_physical_device_properties(physical);
        let mut driver = vk::PhysicalDeviceDriverProperties::default();
        if version(props.api_version) >= (1, 2, 0) {
            let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut driver);
            instance.get_physical_device_properties2(physical, &mut p2);
        }
        let families = instance.get_physical_device_queue_family_properties(physical);
        // A compute queue; prefer one without graphics (NVIDIA's async compute family).
        let compute: Vec<(usize, &vk::QueueFamilyProperties)> = families
            .iter()
            .enumerate()
            .filter(|(_, f)| f.queue_flags.contains(vk::QueueFlags::COMPUTE) && f.queue_count > 0)
            .collect();
        let pick = compute
            .iter()
            .find(|(_, f)| !f.queue_flags.contains(vk::QueueFlags::GRAPHICS))
            .or_else(|| compute.first());
        let extensions = instance
            .enumerate_device_extension_properties(physical)
            .unwrap_or_default()
            .iter()
            .map(|e| c_name(e.extension_name_as_c_str()))
            .collect();
        Candidate {
            physical,
            props,
            name: c_name(props.device_name_as_c_str()),
            driver: c_name(driver.driver_name_as_c_str()),
            driver_info: c_name(driver.driver_info_as_c_str()),
            queue_family: pick.and_then(|(k, _)| u32::try_from(*k).ok()),
            timestamp_bits: pick.map_or(0, |(_, f)| f.timestamp_valid_bits),
            extensions,
        }
    }
}

fn choose_wave(
    policy: WavePolicy,
    default: u32,
    min: u32,
    max: u32,
    control: bool,
) -> Result<Wave, VulkanError> {
    let can_require = |n: u32| control && n.is_power_of_two() && (min..=max).contains(&n);
    match policy {
        WavePolicy::Size(n) if can_require(n) => Ok(Wave {
            size: n,
            source: WaveSource::Required,
        }),
        WavePolicy::Size(n) if min == max && n == min => Ok(Wave {
            size: n,
            source: WaveSource::Fixed,
        }),
        WavePolicy::Size(n) => Err(unavailable(format!(
            "TESSERA_VK_WAVE={n} asked for, but the device runs subgroups of {min}..={max} and {}",
            if control {
                "cannot be pinned to that size"
            } else {
                "offers no subgroup size control"
            }
        ))),
        _ if min == max => Ok(Wave {
            size: min,
            source: WaveSource::Fixed,
        }),
        WavePolicy::Auto if can_require(32) => Ok(Wave {
            size: 32,
            source: WaveSource::Required,
        }),
        WavePolicy::Auto | WavePolicy::DriverDefault => Ok(Wave {
            size: default,
            source: WaveSource::DriverDefault,
        }),
    }
}

/// What `open_device` made, before it joins the instance in [`Shared`].
struct Opened {
    device: ash::Device,
    queue: vk::Queue,
    queue_family: u32,
    memory: vk::PhysicalDeviceMemoryProperties,
    info: AdapterInfo,
    pipeline_cache: vk::PipelineCache,
    set_layout: vk::DescriptorSetLayout,
    pipeline_layout: vk::PipelineLayout,
    /// VK_KHR_pipeline_executable_properties was enabled on `device`.
    pipeline_statistics: bool,
}

/// A handle on one Vulkan device, shared by every tensor uploaded to it.
#[derive(Clone)]
pub struct Context {
    pub(crate) shared: Arc<Shared>,
}

/// The Vulkan loader and the one instance of this process.
struct Loader {
    // Keeps libvulkan loaded for as long as the instance exists: for the whole process.
    _entry: ash::Entry,
    instance: ash::Instance,
}

static INSTANCES_CREATED: AtomicUsize = AtomicUsize::new(0);

/// How many `VkInstance`s this process has created: 1 once any device was opened (0 before,
/// or when no loader or ICD exists), however many backends were opened and dropped.
pub fn instances_created() -> usize {
    INSTANCES_CREATED.load(Ordering::Relaxed)
}

/// The process's loader and instance, made on first use; a failure is kept and returned to
/// every later caller (nothing in the process can fix a missing loader or ICD).
fn loader() -> Result<&'static Loader, VulkanError> {
    static LOADER: OnceLock<Result<Loader, VulkanError>> = OnceLock::new();
    LOADER
        .get_or_init(Loader::open)
        .as_ref()
        .map_err(Clone::clone)
}

impl Loader {
    fn open() -> Result<Loader, VulkanError> {
        // SAFETY: loading libvulkan runs its initialisers; ash keeps the library open for as
        // long as the `Entry` (kept in `Shared`) lives, which outlives every handle.
        let entry = unsafe { ash::Entry::load() }.map_err(|e| {
            unavailable(format!(
                "no Vulkan loader (libvulkan.so.1 could not be opened: {e})"
            ))
        })?;
        // SAFETY: a global query on a loaded entry.
        let instance_version = unsafe { entry.try_enumerate_instance_version() }
            .map_err(|e| unavailable(format!("vkEnumerateInstanceVersion failed: {e:?}")))?
            .unwrap_or(vk::API_VERSION_1_0);
        if version(instance_version) < (1, 1, 0) {
            return Err(unavailable(format!(
                "the Vulkan loader is {}.{}; 1.1 is needed",
                vk::api_version_major(instance_version),
                vk::api_version_minor(instance_version)
            )));
        }
        let api = instance_version.min(vk::API_VERSION_1_3);
        let app = vk::ApplicationInfo::default()
            .application_name(c"tessera")
            .engine_name(c"tessera kernels-rocm")
            .api_version(api);
        // SAFETY: a global query on a loaded entry.
        let instance_exts =
            unsafe { entry.enumerate_instance_extension_properties(None) }.unwrap_or_default();
        // MoltenVK and other portability drivers are only listed when asked for.
        let portability = instance_exts
            .iter()
            .any(|e| e.extension_name_as_c_str() == Ok(ash::khr::portability_enumeration::NAME));
        let ext_names = if portability {
            vec![ash::khr::portability_enumeration::NAME.as_ptr()]
        } else {
            vec![]
        };
        let flags = if portability {
            vk::InstanceCreateFlags::ENUMERATE_PORTABILITY_KHR
        } else {
            vk::InstanceCreateFlags::empty()
        };
        let create = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_extension_names(&ext_names)
            .flags(flags);
        // SAFETY: `create` and everything it points to live through the call.
        let instance = unsafe { entry.create_instance(&create, None) }.map_err(|e| {
            unavailable(format!(
                "vkCreateInstance failed ({e:?}): no Vulkan driver (ICD) installed?"
            ))
        })?;
        INSTANCES_CREATED.fetch_add(1, Ordering::Relaxed);
        Ok(Loader {
            _entry: entry,
            instance,
        })
    }
}

impl Context {
    /// A new device per `options` on the process's instance (opening the loader and the
    /// instance on first use), or why there is none.
    pub fn new(options: &Options) -> Result<Context, VulkanError> {
        let instance = &loader()?.instance;
        match Self::open_device(instance, options) {
            Ok(d) => Ok(Context {
                shared: Arc::new(Shared {
                    pipeline_exec: d.pipeline_statistics.then(|| {
                        ash::khr::pipeline_executable_properties::Device::new(instance, &d.device)
                    }),
                    pipeline_statistics: Mutex::new(Vec::new()),
                    device: d.device,
                    queue: Mutex::new(d.queue),
                    queue_family: d.queue_family,
                    memory: d.memory,
                    info: d.info,
                    pipeline_cache: d.pipeline_cache,
                    set_layout: d.set_layout,
                    pipeline_layout: d.pipeline_layout,
                    pipelines: Mutex::new(HashMap::new()),
                    stats: Stats::default(),
                }),
            }),
            Err(e) => Err(e),
        }
    }

    /// The device `options` select, shared by every caller in this process that asks for
    /// the same options (the conformance adapters: one device, one pipeline cache, for a
    /// whole test run). It lives until the process exits. Failures are not kept: a later
    /// call tries again.
    pub fn shared(options: &Options) -> Result<Context, VulkanError> {
        static SHARED: Mutex<Vec<(Options, Context)>> = Mutex::new(Vec::new());
        let mut all = lock(&SHARED);
        if let Some((_, c)) = all.iter().find(|(o, _)| o == options) {
            return Ok(c.clone());
        }
        let c = Context::new(options)?;
        all.push((options.clone(), c.clone()));
        Ok(c)
    }

    fn open_device(instance: &ash::Instance, options: &Options) -> Result<Opened, VulkanError> {
        // SAFETY: a query on a live instance.
        let physicals = unsafe { instance.enumerate_physical_devices() }
            .map_err(|e| unavailable(format!("vkEnumeratePhysicalDevices failed: {e:?}")))?;
        let candidates: Vec<Candidate> = physicals
            .iter()
            // SAFETY: each handle comes from this (>= 1.1) instance.
            .map(|&p| unsafe { describe(instance, p) })
            .collect();
        if candidates.is_empty() {
            return Err(unavailable(
                "the Vulkan loader found no device (no ICD installed; set VK_DRIVER_FILES or install mesa-vulkan-drivers)",
            ));
        }
        let listed: Vec<String> = candidates
            .iter()
            .map(|c| {
                format!(
                    "{} [{}, {}]",
                    c.name,
                    c.driver,
                    type_name(c.props.device_type)
                )
            })
            .collect();
        let usable = |c: &&Candidate| c.api() >= (1, 1, 0) && c.queue_family.is_some();
        let chosen = match &options.adapter {
            Some(want) => {
                let want_l = want.to_lowercase();
                candidates
                    .iter()
                    .filter(usable)
                    .find(|c| c.label().to_lowercase().contains(&want_l))
                    .ok_or_else(|| {
                        unavailable(format!(
                            "no Vulkan 1.1 compute adapter matches {want:?} (found: {})",
                            listed.join("; ")
                        ))
                    })
            }
            None => candidates
                .iter()
                .filter(usable)
                .max_by_key(|c| type_rank(c.props.device_type))
                .ok_or_else(|| {
                    unavailable(format!(
                        "no Vulkan 1.1 device with a compute queue (found: {})",
                        listed.join("; ")
                    ))
                }),
        };
        let c = chosen?;
        let family = c.queue_family.unwrap_or(0);
        let size_control_ext = c.has_size_control();

        // Properties: subgroups, and size control where the device has it.
        let mut sg = vk::PhysicalDeviceSubgroupProperties::default();
        let mut sc = vk::PhysicalDeviceSubgroupSizeControlProperties::default();
        {
            let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut sg);
            if size_control_ext {
                p2 = p2.push_next(&mut sc);
            }
            // SAFETY: the chain holds only structures this device's version/extensions
            // define; all live through the call.
            unsafe { instance.get_physical_device_properties2(c.physical, &mut p2) };
        }
        let mut scf = vk::PhysicalDeviceSubgroupSizeControlFeatures::default();
        if size_control_ext {
            let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut scf);
            // SAFETY: as above.
            unsafe { instance.get_physical_device_features2(c.physical, &mut f2) };
        }
        let compute_stage = |s: vk::ShaderStageFlags| s.contains(vk::ShaderStageFlags::COMPUTE);
        let control = size_control_ext
            && scf.subgroup_size_control == vk::TRUE
            && compute_stage(sc.required_subgroup_size_stages);
        let full = size_control_ext && scf.compute_full_subgroups == vk::TRUE;
        let (min, max) = if size_control_ext {
            (sc.min_subgroup_size, sc.max_subgroup_size)
        } else {
            (sg.subgroup_size, sg.subgroup_size)
        };
        let wave = choose_wave(options.wave, sg.subgroup_size, min, max, control)?;
        let arithmetic = compute_stage(sg.supported_stages)
            && sg
                .supported_operations
                .contains(vk::SubgroupFeatureFlags::ARITHMETIC | vk::SubgroupFeatureFlags::BASIC);

        // Packed 4 x 8-bit integer dot products (OpSDot), where the device has them.
        let dot_ext =
            c.api() < (1, 3, 0) && c.has_extension(ash::khr::shader_integer_dot_product::NAME);
        let mut dpf = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default();
        if c.api() >= (1, 3, 0) || dot_ext {
            let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut dpf);
            // SAFETY: as above.
            unsafe { instance.get_physical_device_features2(c.physical, &mut f2) };
        }
        let integer_dot_product = dpf.shader_integer_dot_product == vk::TRUE;

        // The device, with size control enabled where present.
        let priorities = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(family)
            .queue_priorities(&priorities)];
        let mut dev_exts = vec![];
        if size_control_ext && c.api() < (1, 3, 0) {
            dev_exts.push(ash::ext::subgroup_size_control::NAME.as_ptr());
        }
        if c.has_extension(ash::khr::portability_subset::NAME) {
            dev_exts.push(ash::khr::portability_subset::NAME.as_ptr());
        }
        if dot_ext && integer_dot_product {
            dev_exts.push(ash::khr::shader_integer_dot_product::NAME.as_ptr());
        }
        let pipeline_statistics = options.pipeline_statistics
            && c.has_extension(ash::khr::pipeline_executable_properties::NAME)
            && pipeline_stats::feature_offered(instance, c.physical);
        if pipeline_statistics {
            dev_exts.push(ash::khr::pipeline_executable_properties::NAME.as_ptr());
        }
        // robustBufferAccess is what keeps the kernels' unchecked buffer accesses in their
        // bindings (build/shaders.rs `spirv_bounds`): required. robustness2, wgpu's extra, on
        // request only (Options::robust_buffer_access2).
        // SAFETY: the physical device comes from this instance.
        let offered = unsafe { instance.get_physical_device_features(c.physical) };
        if offered.robust_buffer_access != vk::TRUE {
            return Err(VulkanError::Unavailable {
                why: format!(
                    "{} lacks robustBufferAccess, which the kernels' unchecked storage-buffer accesses rely on",
                    c.name
                ),
            });
        }
        let robust2_ext =
            options.robust_buffer_access2 && c.has_extension(ash::ext::robustness2::NAME);
        if robust2_ext {
            dev_exts.push(ash::ext::robustness2::NAME.as_ptr());
        }
        let mut r2 = vk::PhysicalDeviceRobustness2FeaturesEXT::default();
        if robust2_ext {
            let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut r2);
            // SAFETY: as above.
            unsafe { instance.get_physical_device_features2(c.physical, &mut f2) };
        }
        let mut enable_r2 = vk::PhysicalDeviceRobustness2FeaturesEXT::default()
            .robust_buffer_access2(r2.robust_buffer_access2 == vk::TRUE);
        let core = vk::PhysicalDeviceFeatures::default().robust_buffer_access(true);
        let mut enable = vk::PhysicalDeviceSubgroupSizeControlFeatures::default()
            .subgroup_size_control(control)
            .compute_full_subgroups(full);
        let mut dci = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .enabled_extension_names(&dev_exts)
            .enabled_features(&core);
        if robust2_ext {
            dci = dci.push_next(&mut enable_r2);
        }
        if size_control_ext {
            dci = dci.push_next(&mut enable);
        }
        let mut enable_dot = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default()
            .shader_integer_dot_product(true);
        if integer_dot_product {
            dci = dci.push_next(&mut enable_dot);
        }
        let mut enable_stats = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default()
            .pipeline_executable_info(true);
        if pipeline_statistics {
            dci = dci.push_next(&mut enable_stats);
        }
        // SAFETY: `dci` and everything it points to live through the call; the physical
        // device comes from this instance.
        let device = unsafe { instance.create_device(c.physical, &dci, None) }
            .map_err(|e| unavailable(format!("vkCreateDevice on {} failed: {e:?}", c.name)))?;
        // SAFETY: family/index 0 was requested in `dci`.
        let queue = unsafe { device.get_device_queue(family, 0) };
        // SAFETY: a query on a live physical device.
        let memory = unsafe { instance.get_physical_device_memory_properties(c.physical) };

        let layouts = Self::create_layouts(&device);
        let (set_layout, pipeline_layout, pipeline_cache) = match layouts {
            Ok(l) => l,
            Err(e) => {
                // SAFETY: nothing else was created from the device.
                unsafe { device.destroy_device(None) };
                return Err(e);
            }
        };
        let limits = c.props.limits;
        let info = AdapterInfo {
            name: c.name.clone(),
            driver: c.driver.clone(),
            driver_info: c.driver_info.clone(),
            device_type: type_name(c.props.device_type).to_string(),
            vendor_id: c.props.vendor_id,
            api_version: c.api(),
            subgroup_size: sg.subgroup_size,
            subgroup_min: min,
            subgroup_max: max,
            subgroup_arithmetic: arithmetic,
            size_control: control,
            full_subgroups: full,
            wave,
            use_subgroups: arithmetic && options.subgroups == SubgroupPolicy::Auto,
            integer_dot_product,
            max_storage_buffer_range: limits.max_storage_buffer_range,
            max_workgroup_count: limits.max_compute_work_group_count,
            timestamp_period: (c.timestamp_bits > 0).then_some(limits.timestamp_period),
            others: listed,
        };
        Ok(Opened {
            device,
            queue,
            queue_family: family,
            memory,
            info,
            pipeline_cache,
            set_layout,
            pipeline_layout,
            pipeline_statistics,
        })
    }

    /// The descriptor-set layout (4 storage buffers), the pipeline layout (that set plus
    /// the 16-byte `Params` push constants) and the pipeline cache every kernel shares.
    fn create_layouts(
        device: &ash::Device,
    ) -> Result<
        (
            vk::DescriptorSetLayout,
            vk::PipelineLayout,
            vk::PipelineCache,
        ),
        VulkanError,
    > {
        let bindings: Vec<vk::DescriptorSetLayoutBinding> = (0..BINDINGS)
            .map(|b| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(b)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let dsl = vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings);
        // SAFETY: live device; the info lives through the call.
        let set_layout = unsafe { device.create_descriptor_set_layout(&dsl, None) }
            .map_err(VulkanError::vk("creating the descriptor set layout"))?;
        let ranges = [vk::PushConstantRange::default()
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
            .offset(0)
            .size(PARAMS_BYTES)];
        let set_layouts = [set_layout];
        let pl = vk::PipelineLayoutCreateInfo::default()
            .set_layouts(&set_layouts)
            .push_constant_ranges(&ranges);
        // SAFETY: as above.
        let pipeline_layout = match unsafe { device.create_pipeline_layout(&pl, None) } {
            Ok(l) => l,
            Err(e) => {
                // SAFETY: the set layout was created above and nothing uses it yet.
                unsafe { device.destroy_descriptor_set_layout(set_layout, None) };
                return Err(VulkanError::vk("creating the pipeline layout")(e));
            }
        };
        let initial = std::env::var_os("TESSERA_VK_PIPELINE_CACHE")
            .and_then(|p| std::fs::read(p).ok())
            .unwrap_or_default();
        let pc = vk::PipelineCacheCreateInfo::default().initial_data(&initial);
        // SAFETY: as above; a driver validates the header of `initial` and ignores data
        // from another device or driver version.
        let cache = match unsafe { device.create_pipeline_cache(&pc, None) } {
            Ok(c) => c,
            Err(e) => {
                // SAFETY: both layouts were created above and nothing uses them yet.
                unsafe {
                    device.destroy_pipeline_layout(pipeline_layout, None);
                    device.destroy_descriptor_set_layout(set_layout, None);
                }
                return Err(VulkanError::vk("creating the pipeline cache")(e));
            }
        };
        Ok((set_layout, pipeline_layout, cache))
    }

    pub fn info(&self) -> &AdapterInfo {
        &self.shared.info
    }

    /// Whether `self` and `other` are the same device (clones of one [`Context`]).
    pub fn same_device(&self, other: &Context) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    pub fn stats(&self) -> &Stats {
        &self.shared.stats
    }

    /// What the driver reported for each pipeline created so far (module key, statistics),
    /// in creation order; `None` when statistics were not asked for
    /// ([`Options::pipeline_statistics`]) or the device does not offer them.
    pub fn pipeline_statistics(&self) -> Option<Vec<(String, Vec<PipelineStatistic>)>> {
        self.shared
            .pipeline_exec
            .as_ref()
            .map(|_| lock(&self.shared.pipeline_statistics).clone())
    }

    /// Writes the pipeline cache to `TESSERA_VK_PIPELINE_CACHE` if that is set (the next
    /// process then skips the driver's shader compiles).
    pub fn save_pipeline_cache(&self) -> Result<(), VulkanError> {
        let Some(path) = std::env::var_os("TESSERA_VK_PIPELINE_CACHE") else {
            return Ok(());
        };
        // SAFETY: the cache belongs to this live device.
        let data = unsafe {
            self.shared
                .device
                .get_pipeline_cache_data(self.shared.pipeline_cache)
        }
        .map_err(VulkanError::vk("reading the pipeline cache"))?;
        std::fs::write(&path, data).map_err(|e| VulkanError::Vk {
            during: "writing the pipeline cache file",
            result: format!("{}: {e}", std::path::Path::new(&path).display()),
        })
    }

    /// The compute pipeline `key` (one per shader module and specialisation), created on
    /// first use from `spirv` and reused after.
    pub fn pipeline(
        &self,
        key: &str,
        spirv: &[u8],
        entry: &str,
        workgroup_x: u32,
    ) -> Result<vk::Pipeline, VulkanError> {
        let s = &self.shared;
        let mut map = lock(&s.pipelines);
        if let Some(&p) = map.get(key) {
            return Ok(p);
        }
        let words = spirv_words(key, spirv)?;
        let entry_c = CString::new(entry).map_err(|_| VulkanError::Shader {
            what: format!("{key}: entry point {entry:?} contains a NUL"),
        })?;
        let smi = vk::ShaderModuleCreateInfo::default().code(&words);
        // SAFETY: live device; `words` is a whole number of SPIR-V words starting with the
        // magic number (checked by `spirv_words`), produced by naga and validated there.
        let module = unsafe { s.device.create_shader_module(&smi, None) }
            .map_err(VulkanError::vk("creating a shader module"))?;
        let wave = s.info.wave;
        let mut required = vk::PipelineShaderStageRequiredSubgroupSizeCreateInfo::default()
            .required_subgroup_size(wave.size);
        let pin = wave.source == WaveSource::Required;
        // Full subgroups: every subgroup of a workgroup is complete, which the subgroup
        // reductions rely on for speed (not for correctness). Legal only when the
        // workgroup width is a multiple of the largest size the driver might use.
        let widest = if pin { wave.size } else { s.info.subgroup_max };
        let full = s.info.full_subgroups && widest > 0 && workgroup_x.is_multiple_of(widest);
        let mut stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(module)
            .name(&entry_c);
        if full {
            stage = stage.flags(vk::PipelineShaderStageCreateFlags::REQUIRE_FULL_SUBGROUPS);
        }
        if pin {
            stage = stage.push_next(&mut required);
        }
        let capture = if s.pipeline_exec.is_some() {
            vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR
        } else {
            vk::PipelineCreateFlags::empty()
        };
        let info = [vk::ComputePipelineCreateInfo::default()
            .flags(capture)
            .stage(stage)
            .layout(s.pipeline_layout)];
        // SAFETY: live device, cache and layout; every pointer in `info` lives through the
        // call. The shader module may be destroyed once the pipeline exists.
        let made = unsafe {
            let r = s
                .device
                .create_compute_pipelines(s.pipeline_cache, &info, None);
            s.device.destroy_shader_module(module, None);
            r
        };
        let pipeline = match made {
            Ok(v) => v.into_iter().next().ok_or_else(|| VulkanError::Vk {
                during: "creating a compute pipeline",
                result: "no pipeline returned".into(),
            })?,
            Err((_, e)) => {
                return Err(VulkanError::Vk {
                    during: "creating a compute pipeline",
                    result: format!("{e:?} ({key})"),
                });
            }
        };
        s.stats.pipelines_created.fetch_add(1, Ordering::Relaxed);
        if let Some(ext) = &s.pipeline_exec {
            // A diagnostic: a failed query is recorded as such, never an error of the GEMV.
            let got = pipeline_stats::query(ext, pipeline).unwrap_or_else(|e| {
                vec![PipelineStatistic {
                    executable: String::new(),
                    name: "query failed".into(),
                    value: format!("{e:?}"),
                }]
            });
            lock(&s.pipeline_statistics).push((key.to_string(), got));
        }
        map.insert(key.to_string(), pipeline);
        Ok(pipeline)
    }

    /// Submits `cmd` and blocks until it completed (`fence` is reset first).
    pub(crate) fn submit_wait(
        &self,
        cmd: vk::CommandBuffer,
        fence: vk::Fence,
    ) -> Result<(), VulkanError> {
        let s = &self.shared;
        let cmds = [cmd];
        let submit = [vk::SubmitInfo::default().command_buffers(&cmds)];
        // SAFETY: `fence` is not in use (callers own it and always wait on it before
        // returning); the queue is externally synchronised by its mutex; `cmd` is fully
        // recorded and not pending (same reason).
        unsafe {
            s.device
                .reset_fences(&[fence])
                .map_err(VulkanError::vk("resetting a fence"))?;
            {
                let q = lock(&s.queue);
                s.device
                    .queue_submit(*q, &submit, fence)
                    .map_err(VulkanError::vk("vkQueueSubmit"))?;
            }
            s.device
                .wait_for_fences(&[fence], true, u64::MAX)
                .map_err(VulkanError::vk("waiting for the GPU"))?;
        }
        s.stats.submissions.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Records commands with `record` into a transient command buffer, runs them and waits.
    pub(crate) fn one_shot(
        &self,
        record: impl FnOnce(&ash::Device, vk::CommandBuffer),
    ) -> Result<(), VulkanError> {
        let cmd = Commands::new(self)?;
        cmd.record(record)?;
        self.submit_wait(cmd.buffer, cmd.fence)
    }

    /// A buffer of `size` bytes (at least 4), device-local or host-visible.
    pub(crate) fn buffer(
        &self,
        size: u64,
        usage: vk::BufferUsageFlags,
        host: bool,
    ) -> Result<Buffer, VulkanError> {
        Buffer::new(self, size.max(4), usage, host)
    }

    /// Uploads `bytes` (zero-padded to `size`) into a new device-local storage buffer.
    pub(crate) fn upload(&self, bytes: &[u8], size: u64) -> Result<Buffer, VulkanError> {
        let size = size.max(4);
        let dst = self.buffer(
            size,
            vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::TRANSFER_DST,
            false,
        )?;
        let staging = self.buffer(size, vk::BufferUsageFlags::TRANSFER_SRC, true)?;
        staging.write(bytes, size)?;
        self.one_shot(|d, cmd| {
            let region = [vk::BufferCopy::default().size(size)];
            // SAFETY: recording into a buffer in the recording state; both buffers are
            // live and at least `size` bytes.
            unsafe { d.cmd_copy_buffer(cmd, staging.buffer, dst.buffer, &region) };
        })?;
        Ok(dst)
    }

    fn memory_type(&self, bits: u32, host: bool) -> Option<(u32, vk::MemoryPropertyFlags)> {
        let m = &self.shared.memory;
        let types = &m.memory_types[..m.memory_type_count as usize];
        let want = if host {
            vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT
        } else {
            vk::MemoryPropertyFlags::DEVICE_LOCAL
        };
        // Host buffers that are read back prefer cached memory; device buffers take any
        // device-local type, and fall back to whatever is allowed (e.g. a CPU driver).
        let preferred = if host {
            want | vk::MemoryPropertyFlags::HOST_CACHED
        } else {
            want
        };
        let allowed = |k: usize| bits & (1 << k) != 0;
        let find = |flags: vk::MemoryPropertyFlags| {
            types
                .iter()
                .enumerate()
                .find(|(k, t)| allowed(*k) && t.property_flags.contains(flags))
                .and_then(|(k, t)| Some((u32::try_from(k).ok()?, t.property_flags)))
        };
        find(preferred).or_else(|| find(want)).or_else(|| {
            if host {
                None
            } else {
                find(vk::MemoryPropertyFlags::empty())
            }
        })
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// SPIR-V bytes as words, checked for length and magic number.
pub fn spirv_words(name: &str, bytes: &[u8]) -> Result<Vec<u32>, VulkanError> {
    if bytes.is_empty() || !bytes.len().is_multiple_of(4) {
        return Err(VulkanError::Shader {
            what: format!(
                "{name}: {} bytes is not a whole number of SPIR-V words",
                bytes.len()
            ),
        });
    }
    let words: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if words[0] != 0x0723_0203 {
        return Err(VulkanError::Shader {
            what: format!("{name}: not SPIR-V (magic {:#010x})", words[0]),
        });
    }
    Ok(words)
}

/// A buffer and its own memory allocation.
pub(crate) struct Buffer {
    ctx: Context,
    pub(crate) buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    pub(crate) size: u64,
    host: bool,
}

impl Buffer {
    fn new(
        ctx: &Context,
        size: u64,
        usage: vk::BufferUsageFlags,
        host: bool,
    ) -> Result<Buffer, VulkanError> {
        let d = &ctx.shared.device;
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(usage)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: live device; size > 0.
        let buffer = unsafe { d.create_buffer(&info, None) }
            .map_err(VulkanError::vk("creating a buffer"))?;
        // SAFETY: the buffer was just created on this device.
        let req = unsafe { d.get_buffer_memory_requirements(buffer) };
        let Some((type_index, _)) = ctx.memory_type(req.memory_type_bits, host) else {
            // SAFETY: not bound or used yet.
            unsafe { d.destroy_buffer(buffer, None) };
            return Err(VulkanError::Vk {
                during: "choosing a memory type",
                result: format!(
                    "no {} memory type for a {size}-byte buffer",
                    if host { "host-visible" } else { "device" }
                ),
            });
        };
        let alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(req.size)
            .memory_type_index(type_index);
        // SAFETY: live device; a valid type index for this buffer.
        let memory = match unsafe { d.allocate_memory(&alloc, None) } {
            Ok(m) => m,
            Err(e) => {
                // SAFETY: not bound or used yet.
                unsafe { d.destroy_buffer(buffer, None) };
                return Err(VulkanError::vk("allocating device memory")(e));
            }
        };
        // SAFETY: fresh buffer and fresh allocation of at least `req.size` bytes.
        if let Err(e) = unsafe { d.bind_buffer_memory(buffer, memory, 0) } {
            // SAFETY: neither is in use.
            unsafe {
                d.destroy_buffer(buffer, None);
                d.free_memory(memory, None);
            }
            return Err(VulkanError::vk("binding buffer memory")(e));
        }
        Ok(Buffer {
            ctx: ctx.clone(),
            buffer,
            memory,
            size,
            host,
        })
    }

    /// Copies `bytes` to the start of a host-visible buffer and zero-fills up to `len`.
    pub(crate) fn write(&self, bytes: &[u8], len: u64) -> Result<(), VulkanError> {
        let len_usize = usize::try_from(len).unwrap_or(usize::MAX);
        if !self.host || len > self.size || bytes.len() > len_usize {
            return Err(VulkanError::Vk {
                during: "writing a buffer",
                result: format!(
                    "{} bytes into a {}-byte {} buffer",
                    bytes.len(),
                    self.size,
                    if self.host { "host" } else { "device" }
                ),
            });
        }
        let d = &self.ctx.shared.device;
        // SAFETY: host-visible, coherent memory owned by this buffer and not mapped
        // elsewhere (buffers are used under their owner's lock); the copy stays within the
        // `len <= size` mapped bytes.
        unsafe {
            let p = d
                .map_memory(self.memory, 0, len, vk::MemoryMapFlags::empty())
                .map_err(VulkanError::vk("mapping memory"))?
                .cast::<u8>();
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len());
            std::ptr::write_bytes(p.add(bytes.len()), 0, len_usize - bytes.len());
            d.unmap_memory(self.memory);
        }
        Ok(())
    }

    /// Copies the first `out.len()` bytes of a host-visible buffer.
    pub(crate) fn read(&self, out: &mut [u8]) -> Result<(), VulkanError> {
        if !self.host || out.len() as u64 > self.size {
            return Err(VulkanError::Vk {
                during: "reading a buffer",
                result: format!("{} bytes from a {}-byte buffer", out.len(), self.size),
            });
        }
        let d = &self.ctx.shared.device;
        // SAFETY: as in `write`; the GPU's writes were made host-visible by a barrier and
        // the fence wait before any caller reads.
        unsafe {
            let p = d
                .map_memory(
                    self.memory,
                    0,
                    out.len() as u64,
                    vk::MemoryMapFlags::empty(),
                )
                .map_err(VulkanError::vk("mapping memory"))?
                .cast::<u8>();
            std::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), out.len());
            d.unmap_memory(self.memory);
        }
        Ok(())
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let d = &self.ctx.shared.device;
        // SAFETY: every command buffer that used this buffer was waited on before its
        // owner returned, so the GPU no longer reads or writes it.
        unsafe {
            d.destroy_buffer(self.buffer, None);
            d.free_memory(self.memory, None);
        }
    }
}

/// A command pool with one primary command buffer and a fence, owned by one user at a time.
pub(crate) struct Commands {
    ctx: Context,
    pool: vk::CommandPool,
    pub(crate) buffer: vk::CommandBuffer,
    pub(crate) fence: vk::Fence,
}

impl Commands {
    pub(crate) fn new(ctx: &Context) -> Result<Commands, VulkanError> {
        let d = &ctx.shared.device;
        let info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(ctx.shared.queue_family)
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        // SAFETY: live device.
        let pool = unsafe { d.create_command_pool(&info, None) }
            .map_err(VulkanError::vk("creating a command pool"))?;
        let alloc = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool was just created and is used by this thread only.
        let buffer = match unsafe { d.allocate_command_buffers(&alloc) } {
            Ok(v) => v[0],
            Err(e) => {
                // SAFETY: unused pool.
                unsafe { d.destroy_command_pool(pool, None) };
                return Err(VulkanError::vk("allocating a command buffer")(e));
            }
        };
        // SAFETY: live device.
        let fence = match unsafe { d.create_fence(&vk::FenceCreateInfo::default(), None) } {
            Ok(f) => f,
            Err(e) => {
                // SAFETY: unused pool (its buffer is freed with it).
                unsafe { d.destroy_command_pool(pool, None) };
                return Err(VulkanError::vk("creating a fence")(e));
            }
        };
        Ok(Commands {
            ctx: ctx.clone(),
            pool,
            buffer,
            fence,
        })
    }

    /// Records the command buffer anew (it must not be pending).
    pub(crate) fn record(
        &self,
        record: impl FnOnce(&ash::Device, vk::CommandBuffer),
    ) -> Result<(), VulkanError> {
        let d = &self.ctx.shared.device;
        let begin = vk::CommandBufferBeginInfo::default();
        // SAFETY: the buffer is not pending (every submission is waited on) and its pool is
        // used by the owner of this `Commands` only.
        unsafe {
            d.reset_command_buffer(self.buffer, vk::CommandBufferResetFlags::empty())
                .map_err(VulkanError::vk("resetting a command buffer"))?;
            d.begin_command_buffer(self.buffer, &begin)
                .map_err(VulkanError::vk("beginning a command buffer"))?;
            record(d, self.buffer);
            d.end_command_buffer(self.buffer)
                .map_err(VulkanError::vk("recording a command buffer"))?;
        }
        self.ctx
            .shared
            .stats
            .command_buffers_recorded
            .fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    pub(crate) fn run(&self) -> Result<(), VulkanError> {
        self.ctx.submit_wait(self.buffer, self.fence)
    }
}

impl Drop for Commands {
    fn drop(&mut self) {
        let d = &self.ctx.shared.device;
        // SAFETY: every submission of the buffer was waited on; destroying the pool frees it.
        unsafe {
            d.destroy_fence(self.fence, None);
            d.destroy_command_pool(self.pool, None);
        }
    }
}

/// A descriptor pool holding one set of the shared layout, bound to four buffers.
pub(crate) struct DescriptorSet {
    ctx: Context,
    pool: vk::DescriptorPool,
    pub(crate) set: vk::DescriptorSet,
}

impl DescriptorSet {
    pub(crate) fn new(ctx: &Context, buffers: [&Buffer; 4]) -> Result<DescriptorSet, VulkanError> {
        let d = &ctx.shared.device;
        let sizes = [vk::DescriptorPoolSize::default()
            .ty(vk::DescriptorType::STORAGE_BUFFER)
            .descriptor_count(BINDINGS)];
        let info = vk::DescriptorPoolCreateInfo::default()
            .max_sets(1)
            .pool_sizes(&sizes);
        // SAFETY: live device.
        let pool = unsafe { d.create_descriptor_pool(&info, None) }
            .map_err(VulkanError::vk("creating a descriptor pool"))?;
        let layouts = [ctx.shared.set_layout];
        let alloc = vk::DescriptorSetAllocateInfo::default()
            .descriptor_pool(pool)
            .set_layouts(&layouts);
        // SAFETY: the pool was just created with room for this one set.
        let set = match unsafe { d.allocate_descriptor_sets(&alloc) } {
            Ok(v) => v[0],
            Err(e) => {
                // SAFETY: unused pool.
                unsafe { d.destroy_descriptor_pool(pool, None) };
                return Err(VulkanError::vk("allocating a descriptor set")(e));
            }
        };
        let infos: Vec<[vk::DescriptorBufferInfo; 1]> = buffers
            .iter()
            .map(|b| {
                [vk::DescriptorBufferInfo::default()
                    .buffer(b.buffer)
                    .offset(0)
                    .range(vk::WHOLE_SIZE)]
            })
            .collect();
        let writes: Vec<vk::WriteDescriptorSet> = infos
            .iter()
            .zip(0u32..)
            .map(|(i, binding)| {
                vk::WriteDescriptorSet::default()
                    .dst_set(set)
                    .dst_binding(binding)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(i)
            })
            .collect();
        // SAFETY: the set is not in use by any command buffer yet; the buffers are live.
        unsafe { d.update_descriptor_sets(&writes, &[]) };
        ctx.shared
            .stats
            .descriptor_sets_allocated
            .fetch_add(1, Ordering::Relaxed);
        Ok(DescriptorSet {
            ctx: ctx.clone(),
            pool,
            set,
        })
    }
}

impl Drop for DescriptorSet {
    fn drop(&mut self) {
        // SAFETY: no pending command buffer uses the set (all were waited on).
        unsafe {
            self.ctx
                .shared
                .device
                .destroy_descriptor_pool(self.pool, None)
        };
    }
}

/// Records one dispatch of `pipeline` over `set` with `params`.
///
/// # Safety
/// `cmd` must be in the recording state on `ctx`'s device; `pipeline` and `set` must be
/// live objects of that device, made with the shared layouts.
pub(crate) unsafe fn cmd_dispatch(
    ctx: &Context,
    cmd: vk::CommandBuffer,
    pipeline: vk::Pipeline,
    set: vk::DescriptorSet,
    params: Params,
    grid: [u32; 3],
) {
    let s = &ctx.shared;
    // SAFETY: per the function contract.
    unsafe {
        s.device
            .cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, pipeline);
        s.device.cmd_bind_descriptor_sets(
            cmd,
            vk::PipelineBindPoint::COMPUTE,
            s.pipeline_layout,
            0,
            &[set],
            &[],
        );
        s.device.cmd_push_constants(
            cmd,
            s.pipeline_layout,
            vk::ShaderStageFlags::COMPUTE,
            0,
            &params.to_bytes(),
        );
        s.device.cmd_dispatch(cmd, grid[0], grid[1], grid[2]);
    }
}

/// A global memory barrier between `src` and `dst` stages/accesses.
///
/// # Safety
/// `cmd` must be in the recording state on `d`.
pub(crate) unsafe fn cmd_barrier(
    d: &ash::Device,
    cmd: vk::CommandBuffer,
    src: (vk::PipelineStageFlags, vk::AccessFlags),
    dst: (vk::PipelineStageFlags, vk::AccessFlags),
) {
    let b = [vk::MemoryBarrier::default()
        .src_access_mask(src.1)
        .dst_access_mask(dst.1)];
    // SAFETY: per the function contract.
    unsafe {
        d.cmd_pipeline_barrier(
            cmd,
            src.0,
            dst.0,
            vk::DependencyFlags::empty(),
            &b,
            &[],
            &[],
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wave_choice() {
        let w = |p, d, lo, hi, c| choose_wave(p, d, lo, hi, c);
        // RDNA: 32..=64 with control: wave32 required.
        assert_eq!(
            w(WavePolicy::Auto, 64, 32, 64, true).unwrap(),
            Wave {
                size: 32,
                source: WaveSource::Required
            }
        );
        assert_eq!(
            w(WavePolicy::Size(64), 64, 32, 64, true).unwrap(),
            Wave {
                size: 64,
                source: WaveSource::Required
            }
        );
        // NVIDIA, GCN, lavapipe: one size, nothing to choose.
        assert_eq!(
            w(WavePolicy::Auto, 32, 32, 32, true).unwrap().source,
            WaveSource::Fixed
        );
        assert_eq!(w(WavePolicy::Auto, 8, 8, 8, true).unwrap().size, 8);
        // No control offered: the driver decides.
        assert_eq!(
            w(WavePolicy::Auto, 64, 32, 64, false).unwrap(),
            Wave {
                size: 64,
                source: WaveSource::DriverDefault
            }
        );
        assert!(w(WavePolicy::Size(64), 8, 8, 8, true).is_err());
        assert!(w(WavePolicy::Size(32), 64, 32, 64, false).is_err());
        assert_eq!(
            w(WavePolicy::DriverDefault, 64, 32, 64, true)
                .unwrap()
                .source,
            WaveSource::DriverDefault
        );
    }

    #[test]
    fn spirv_words_are_checked() {
        assert!(spirv_words("x", &[]).is_err());
        assert!(spirv_words("x", &[3, 2, 35, 7, 0]).is_err());
        assert!(spirv_words("x", &[0, 0, 0, 0]).is_err());
        assert_eq!(spirv_words("x", &[3, 2, 35, 7]).unwrap(), vec![0x0723_0203]);
    }
}
