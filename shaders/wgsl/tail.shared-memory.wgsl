// ---- tail: entry point and reduction across the workgroup (shared-memory variant) ---------
// shaders/wgsl/tail.shared-memory.wgsl: composed after every family file for the plain
// `gemv_*.wgsl` kernels; tail.subgroup.wgsl is the subgroup variant.

// 16 partials of each of the (at most 128) invocations.
var<workgroup> red: array<f32, 2048>;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row0 = (wid.x + wid.y * nwg.x) * ROWS;
    // Uniform across the workgroup: a workgroup past O does nothing.
    if (row0 >= p.o) {
        return;
    }
    if (S > 1u && ROWS == 4u && fastb()) {
        // The family's S > 1 path (prelude `AccB`): S x 4 values, reduced 16 at a time
        // (batch rows 4j .. 4j + 3 of the 4 rows).
        let a = partialb(row0, lid);
        for (var j = 0u; j < (S + 3u) / 4u; j++) {
            for (var m = 0u; m < 4u; m++) {
                let v = accb_at(a, 4u * j + m);
                red[(4u * m) * WG + lid] = v.x;
                red[(4u * m + 1u) * WG + lid] = v.y;
                red[(4u * m + 2u) * WG + lid] = v.z;
                red[(4u * m + 3u) * WG + lid] = v.w;
            }
            // Value k = 4 m + r: batch row 4 j + m of row row0 + r.
            let k = lid;
            let s = 4u * j + (k >> 2u);
            reduce16(lid, 16u, row0 + (k & 3u), s, s < S);
        }
        return;
    }
    let n = ROWS * S;
    if (S == 1u && fast1()) {
        // The family's S = 1 path: the row partials in one vector, no private arrays.
        let a = partial1(row0, lid);
        red[lid] = a.x;
        red[WG + lid] = a.y;
        red[2u * WG + lid] = a.z;
        red[3u * WG + lid] = a.w;
    } else {
        for (var k = 0u; k < 16u; k++) {
            acc[k] = 0.0;
            t[k] = 0.0;
            u[k] = 0.0;
        }
        partial(row0, lid);
        for (var k = 0u; k < n; k++) {
            red[k * WG + lid] = acc[k];
        }
    }
    // Value k: batch row k % S of row row0 + k / S.
    reduce16(lid, n, row0 + lid / S, lid % S, true);
}

// Sums each of the n <= 16 values red[k * WG ..][0 .. WG) and stores value k = lid to
// y[s, row] (where `keep` and row < O; the caller passes lid's row and s). Barriers inside:
// every invocation calls it.
fn reduce16(lid: u32, n: u32, row: u32, s: u32, keep: bool) {
    workgroupBarrier();
    // Invocation lid sums 16 of value lid / per's WG partials (per = WG / 16 invocations a
    // value) ...
    let per = WG / 16u;
    let kk = lid / per;
    var part = 0.0;
    if (kk < n) {
        for (var m = 0u; m < 16u; m++) {
            part += red[kk * WG + (lid % per) * 16u + m];
        }
    }
    workgroupBarrier();
    red[lid] = part;
    workgroupBarrier();
    // ... and invocation k < n adds value k's per sums and stores it.
    if (lid < n) {
        var v = 0.0;
        for (var m = 0u; m < per; m++) {
            v += red[lid * per + m];
        }
        if (keep && row < p.o) {
            y[s * p.o + row] = v;
        }
    }
    // red is written again by the caller's next pass.
    workgroupBarrier();
}
