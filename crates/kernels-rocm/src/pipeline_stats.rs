//! What the driver reports about each compute pipeline it compiled, through
//! VK_KHR_pipeline_executable_properties: register count, shared memory, instruction counts,
//! named and formatted as that driver chooses. A diagnostic for the speed work
//! (docs/VULKAN.md): how many registers a kernel takes sets how many workgroups an SM (or CU)
//! holds at once, which no timing shows directly. Off unless asked for
//! (`Options::pipeline_statistics`, `TESSERA_VK_PIPELINE_STATS=1`), since the capture flag
//! may cost the driver compile time.

use crate::device::c_name;
use ash::vk;

/// One statistic of one executable (a compiled stage) of a pipeline, as the driver names
/// and reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct PipelineStatistic {
    /// The executable's name (for a compute pipeline, usually the one compute stage).
    pub executable: String,
    pub name: String,
    pub value: String,
}

/// Whether the physical device offers `pipelineExecutableInfo` (the caller has checked that
/// the extension is listed).
pub(crate) fn feature_offered(instance: &ash::Instance, physical: vk::PhysicalDevice) -> bool {
    let mut f = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default();
    let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut f);
    // SAFETY: the chain holds one structure the listed extension defines; both live through
    // the call on a physical device of this instance.
    unsafe { instance.get_physical_device_features2(physical, &mut f2) };
    f.pipeline_executable_info == vk::TRUE
}

/// Every statistic of every executable of `pipeline`, created with
/// `CAPTURE_STATISTICS_KHR` on a device with the feature enabled.
pub(crate) fn query(
    ext: &ash::khr::pipeline_executable_properties::Device,
    pipeline: vk::Pipeline,
) -> Result<Vec<PipelineStatistic>, vk::Result> {
    let info = vk::PipelineInfoKHR::default().pipeline(pipeline);
    // SAFETY: a live pipeline of the device `ext` was loaded for.
    let executables = unsafe { ext.get_pipeline_executable_properties(&info) }?;
    let mut out = Vec::new();
    for (index, e) in (0u32..).zip(&executables) {
        let executable = c_name(e.name_as_c_str());
        let which = vk::PipelineExecutableInfoKHR::default()
            .pipeline(pipeline)
            .executable_index(index);
        // SAFETY: as above; `index` is below the count the driver returned.
        for s in unsafe { ext.get_pipeline_executable_statistics(&which) }? {
            out.push(PipelineStatistic {
                executable: executable.clone(),
                name: c_name(s.name_as_c_str()),
                value: value_text(&s),
            });
        }
    }
    Ok(out)
}

/// The statistic's value in the format it declares.
fn value_text(s: &vk::PipelineExecutableStatisticKHR<'_>) -> String {
    // SAFETY: each arm reads the union member that `s.format` says the driver wrote.
    unsafe {
        match s.format {
            vk::PipelineExecutableStatisticFormatKHR::BOOL32 => {
                (s.value.b32 == vk::TRUE).to_string()
            }
            vk::PipelineExecutableStatisticFormatKHR::INT64 => s.value.i64.to_string(),
            vk::PipelineExecutableStatisticFormatKHR::UINT64 => s.value.u64.to_string(),
            vk::PipelineExecutableStatisticFormatKHR::FLOAT64 => s.value.f64.to_string(),
            // `format` is an open Vulkan enum: a later spec may add formats.
            other => format!("(value in unknown format {other:?})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_print_in_their_declared_format() {
        let mut s = vk::PipelineExecutableStatisticKHR {
            format: vk::PipelineExecutableStatisticFormatKHR::UINT64,
            ..Default::default()
        };
        s.value.u64 = 72;
        assert_eq!(value_text(&s), "72");
        s.format = vk::PipelineExecutableStatisticFormatKHR::INT64;
        s.value.i64 = -3;
        assert_eq!(value_text(&s), "-3");
        s.format = vk::PipelineExecutableStatisticFormatKHR::BOOL32;
        s.value.b32 = vk::TRUE;
        assert_eq!(value_text(&s), "true");
        s.format = vk::PipelineExecutableStatisticFormatKHR::FLOAT64;
        s.value.f64 = 0.5;
        assert_eq!(value_text(&s), "0.5");
    }
}
