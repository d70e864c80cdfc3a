//! Parallel loops nested one directly in the next, shared over the
//! threads as one loop.

use super::code::Step;
use super::loop_index::{LoopIndex, all_below};

/// Parallel loops nested one directly in the next (a grid's workgroup
/// loops over y and x), shared over the threads as one loop over all
/// their iterations: the outer loop's alone could leave a thread idle (a
/// 768^3 matmul in 3 x 2 workgroups ran as 3 shares on 2 threads in 5.8
/// ms, as 6 in 4.4).
pub(super) struct Nest<'s> {
    /// Each loop, outermost first.
    loops: Vec<Loop<'s>>,
    /// The innermost loop's body.
    pub body: &'s [Step],
}

/// A loop of a [`Nest`]: its variable, extent and hoisted bounds (see
/// `Step::Loop`).
struct Loop<'s> {
    var: usize,
    extent: i64,
    bounds: &'s [(LoopIndex, i64)],
}

impl<'s> Nest<'s> {
    /// The nest that starts at `step`, a parallel `Step::Loop`.
    pub fn of(mut step: &'s Step) -> Nest<'s> {
        let mut loops = Vec::new();
        loop {
            let Step::Loop {
                var,
                extent,
                bounds,
                body,
                ..
            } = step
            else {
                unreachable!("a nest starts at a loop")
            };
            loops.push(Loop {
                var: *var,
                extent: *extent,
                bounds,
            });
            match body.as_slice() {
                [inner @ Step::Loop { parallel: true, .. }] => step = inner,
                _ => return Nest { loops, body },
            }
        }
    }

    pub fn iterations(&self) -> i64 {
        self.loops.iter().map(|l| l.extent).product()
    }

    /// Sets every loop's variable for iteration `i` of the whole nest
    /// (row-major, as the loops ran); false where a loop's hoisted bound
    /// fails, so the body is skipped.
    pub fn enter(&self, mut i: i64, env: &mut [i64]) -> bool {
        for l in self.loops.iter().rev() {
            env[l.var] = i % l.extent;
            i /= l.extent;
        }
        self.loops.iter().all(|l| all_below(l.bounds, env))
    }
}

#[cfg(test)]
mod tests {
    use super::{Nest, Step};
    use crate::cpu::compile::compiled;
    use tilefuse_schedulers::{heuristics, schedule};

    /// A matmul's ragged 3 x 2 grid of workgroups (300 rows in tiles of
    /// 128, 1000 columns in tiles of 512) is one nest of 6 iterations,
    /// entered row-major, and runs right on 2 threads through it.
    #[test]
    fn a_grid_of_workgroups_is_one_nest() {
        let f = tilefuse_testing::matmul(300, 1000, 256);
        let device = crate::Device::Cpu(crate::cpu::CpuDevice { threads: 2 });
        let info = device.info();
        let edits = [
            ("tile_sizes.cta_tile.m", 128),
            ("tile_sizes.cta_tile.n", 512),
            ("tile_sizes.warp_tile.m", 128),
            ("tile_sizes.warp_tile.n", 512),
            ("tile_sizes.instruction_tile.n", 512),
            ("splitk_factor", 1),
        ];
        let params = (heuristics(&f, None, &info).unwrap())
            .with_all(edits.map(|(path, v)| (path, v.into())))
            .unwrap();
        let s = schedule(&f, &params, &info).unwrap();
        let steps = compiled(&s);
        let grid = steps
            .iter()
            .find(|s| matches!(s, Step::Loop { parallel: true, .. }));
        let nest = Nest::of(grid.expect("a parallel loop"));
        assert_eq!(nest.iterations(), 6);
        let mut env = vec![-1; 64];
        for i in 0..6 {
            assert!(nest.enter(i, &mut env));
            let (y, x) = (nest.loops[0].var, nest.loops[1].var);
            assert_eq!((env[y], env[x]), (i / 2, i % 2));
        }
        let x = tilefuse_testing::inputs(&f, 3);
        let got = device.build(&s).unwrap().run(&x).unwrap();
        let want = tilefuse_ir::evaluate(&f, &x).unwrap();
        tilefuse_testing::compare(&want, &got, 1e-4).unwrap();
    }
}
