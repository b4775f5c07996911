// ---- tail: entry point and reduction across the workgroup (subgroup variant) --------------
// Needs subgroup arithmetic (wgpu Features::SUBGROUP) and at most 32 subgroups a workgroup
// (a subgroup size of at least 4). shaders/wgsl/tail.subgroup.wgsl: composed after every
// family file for the `gemv_*.subgroup.wgsl` kernels.

// 16 partials of each of up to 32 subgroups.
var<workgroup> red: array<f32, 512>;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_invocation_id) sgi: u32,
    @builtin(subgroup_id) sgid: u32,
    @builtin(num_subgroups) nsg: u32,
) {
    let row0 = (wid.x + wid.y * nwg.x) * ROWS;
    // Uniform across the workgroup: a workgroup past O does nothing.
    if (row0 >= p.o) {
        return;
    }
    if (S > 1u && ROWS == 4u && fastb()) {
        // The family's S > 1 path (prelude `AccB`): S x 4 values, 16 at a time (batch rows
        // 4j .. 4j + 3 of the 4 rows; value k = 4 m + r at red[k * 32 ..]).
        let a = partialb(row0, lid);
        for (var j = 0u; j < (S + 3u) / 4u; j++) {
            for (var m = 0u; m < 4u; m++) {
                let v = subgroupAdd(accb_at(a, 4u * j + m));
                if (sgi == 0u) {
                    red[(4u * m) * 32u + sgid] = v.x;
                    red[(4u * m + 1u) * 32u + sgid] = v.y;
                    red[(4u * m + 2u) * 32u + sgid] = v.z;
                    red[(4u * m + 3u) * 32u + sgid] = v.w;
                }
            }
            workgroupBarrier();
            let s = 4u * j + (lid >> 2u);
            let row = row0 + (lid & 3u);
            if (lid < 16u && s < S) {
                var v = 0.0;
                for (var m = 0u; m < nsg; m++) {
                    v += red[lid * 32u + m];
                }
                if (row < p.o) {
                    y[s * p.o + row] = v;
                }
            }
            workgroupBarrier();
        }
        return;
    }
    let n = ROWS * S;
    if (S == 1u && fast1()) {
        // The family's S = 1 path: the row partials in one vector, no private arrays.
        let v = subgroupAdd(partial1(row0, lid));
        if (sgi == 0u) {
            red[sgid] = v.x;
            red[32u + sgid] = v.y;
            red[64u + sgid] = v.z;
            red[96u + sgid] = v.w;
        }
    } else {
        for (var k = 0u; k < 16u; k++) {
            acc[k] = 0.0;
            t[k] = 0.0;
            u[k] = 0.0;
        }
        partial(row0, lid);
        for (var k = 0u; k < n; k++) {
            let v = subgroupAdd(acc[k]);
            if (sgi == 0u) {
                red[k * 32u + sgid] = v;
            }
        }
    }
    workgroupBarrier();
    if (lid < n) {
        var v = 0.0;
        for (var m = 0u; m < nsg; m++) {
            v += red[lid * 32u + m];
        }
        let row = row0 + lid / S;
        if (row < p.o) {
            y[(lid % S) * p.o + row] = v;
        }
    }
}
