//! What a cached winner is the winner for: the fusion's structure, the
//! scheduler, the device (with its limits and, on the CPU, its threads),
//! the params format and the scheduler/codegen version. Any of these
//! changing makes a different key (TVM's database once ignored the target:
//! a winner for one device must never serve another).

use serde::{Deserialize, Serialize};
use tilefuse_ir::{Fusion, sha256_hex as digest};
use tilefuse_params::{PARAMS_VERSION, SchedulerKind};
use tilefuse_sched::DeviceInfo;

/// Bumped when a scheduler, codegen or executor change can change the
/// kernel a params value makes or which params win: entries of older
/// versions are not served, so their winners are tuned again.
/// - 2: the CPU matmul's micro-kernel takes a workgroup's rows in one
///   call, and the CPU executor runs loop chains as one lane step and
///   shares parallel loops in chunks (winners tuned before are stale).
/// - 3: index simplification recombines a quotient and remainder anywhere
///   in a sum (more `vec4` accesses on GPUs, staged copies as one lane step
///   on the CPU), and the CPU micro-kernel takes invocations of one row.
/// - 4: on the CPU, split-k's sum runs over 1024-lane rows a slice of k at
///   a time and the default heuristics split k for idle cores; staged
///   operand tiles copy a row a step; ragged edges cut lane steps instead
///   of masking them; swizzled grids keep the GEMM micro-kernel (each
///   turned a cliff of 10x to 1000x into a candidate that can win).
/// - 5: on the CPU, the micro-kernel takes nests in any loop order (a GPU
///   schedule's invocations around its k loops), stores contiguous in
///   another loop order run as one lane step, loops skip iterations every
///   block of which is out of bounds, and `smem_read` makes no register
///   fragments.
/// - 6: GPU matmuls (not on CPU adapters) store their output tile through
///   workgroup memory by default, 1.2-1.6x faster on an H100: a winner of
///   a quick tune against the old default could be slower than the new.
/// - 7: on the CPU, a row's fold of a load as it is (a row sum) reads the
///   input straight, without a copy through a register: the default's
///   4096-column row sums became 1.9x faster (256-column ones too), faster
///   than the winners tuned against it; thousands of short rows share
///   workgroups of 128 rows by default.
/// - 8: WGSL stages bound the steps of loops that unrolled loops copy out
///   ([`tilefuse_sched::lowering::MAX_COPIED_LOOP_STEPS`]): a winner over
///   the bound would no longer build.
/// - 9: on the CPU, short rows share workgroups of up to 1024 rows (was
///   128) by default, 0.89x the time by the median for rows of 16 and 32:
///   winners tuned against the old default could be slower than the new.
/// - 10: on Vulkan, float arithmetic is decorated `NoContraction` and sums
///   of products step by `fma` (NVIDIA's driver had reassociated `(x + 1)
///   - x` to 1): every GPU kernel's SPIR-V, and the matmul's WGSL, changed.
pub const CODEGEN_VERSION: u32 = 10;

/// A device as a cache key sees it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeviceKey {
    pub backend: String,
    pub vendor: u32,
    pub name: String,
    pub adapter_type: String,
    pub driver: String,
    /// A digest of the device limits.
    pub limits: String,
    /// Threads of the CPU device (0 on GPUs).
    pub cores: usize,
}

impl DeviceKey {
    pub fn of(info: &DeviceInfo) -> DeviceKey {
        DeviceKey {
            backend: info.backend.clone(),
            vendor: info.vendor,
            name: info.name.clone(),
            adapter_type: info.adapter_type.clone(),
            driver: info.driver.clone(),
            limits: digest(&format!("{:?}", info.limits))[..16].to_owned(),
            cores: info.cores,
        }
    }
}

/// The key of one cache entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CacheKey {
    /// `Fusion::fingerprint`: the structure, not the names.
    pub fusion: String,
    pub scheduler: SchedulerKind,
    pub device: DeviceKey,
    pub params_version: u32,
    pub codegen_version: u32,
}

impl CacheKey {
    pub fn new(fusion: &Fusion, scheduler: SchedulerKind, device: &DeviceInfo) -> CacheKey {
        CacheKey {
            fusion: fusion.fingerprint(),
            scheduler,
            device: DeviceKey::of(device),
            params_version: PARAMS_VERSION,
            codegen_version: CODEGEN_VERSION,
        }
    }

    /// Whether this key can still be served: made with this build's params
    /// format and scheduler/codegen version. Entries of older versions are
    /// never looked up again (their keys differ from any made now).
    pub fn is_current(&self) -> bool {
        self.params_version == PARAMS_VERSION && self.codegen_version == CODEGEN_VERSION
    }

    /// The entry's file name, without extension: a digest of the key.
    pub fn file_stem(&self) -> String {
        let json = serde_json::to_string(self).expect("a key serializes");
        digest(&json)[..32].to_owned()
    }

    /// The fields in which `self` and `other` differ (for explaining a
    /// miss), device fields as `device.name` and so on.
    pub fn differences(&self, other: &CacheKey) -> Vec<String> {
        let mut out = Vec::new();
        let mut check = |name: &str, differ: bool| {
            if differ {
                out.push(name.to_owned());
            }
        };
        check("fusion", self.fusion != other.fusion);
        check("scheduler", self.scheduler != other.scheduler);
        let (a, b) = (&self.device, &other.device);
        check("device.backend", a.backend != b.backend);
        check("device.vendor", a.vendor != b.vendor);
        check("device.name", a.name != b.name);
        check("device.adapter_type", a.adapter_type != b.adapter_type);
        check("device.driver", a.driver != b.driver);
        check("device.limits", a.limits != b.limits);
        check("device.cores", a.cores != b.cores);
        check(
            "params_version",
            self.params_version != other.params_version,
        );
        check(
            "codegen_version",
            self.codegen_version != other.codegen_version,
        );
        out
    }
}

/// Which fusions a cached winner is a first guess for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Family {
    /// `Fusion::family`: the structure without the extents.
    pub id: String,
    /// The extents of the fusion's inputs, to rank members by closeness.
    pub sizes: Vec<Vec<usize>>,
}

impl Family {
    pub fn of(fusion: &Fusion) -> Family {
        let types = fusion.types();
        Family {
            id: fusion.family(),
            sizes: (fusion.inputs().iter())
                .map(|t| types[t.0].shape.clone())
                .collect(),
        }
    }

    /// How far apart two members' sizes are: the sum over their inputs'
    /// dimensions of |ln| of the ratio of extents (0 for the same sizes).
    pub(crate) fn distance(&self, other: &Family) -> f64 {
        let dims = self
            .sizes
            .iter()
            .flatten()
            .zip(other.sizes.iter().flatten());
        dims.map(|(&a, &b)| ((a as f64 + 1.0) / (b as f64 + 1.0)).ln().abs())
            .sum()
    }
}
