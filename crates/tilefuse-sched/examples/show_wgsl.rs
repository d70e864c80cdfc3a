//! Prints the schedule and WGSL of each fixture fusion under one recipe:
//! `cargo run -p tilefuse-sched --example show_wgsl -- softmax inline+split+bind`.

use tilefuse_sched::Schedule;
use tilefuse_sched::codegen::generate;
use tilefuse_testing::{fusions, recipes};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (fusion, recipe) = (
        args.first().map_or("softmax", String::as_str),
        args.get(1).map_or("inline+split+bind", String::as_str),
    );
    let (_, f) = fusions()
        .into_iter()
        .find(|(n, _)| *n == fusion)
        .expect("a fixture fusion name");
    let (_, apply) = recipes()
        .into_iter()
        .find(|(n, _)| *n == recipe)
        .expect("a recipe name");
    let mut s = Schedule::new(&f);
    apply(&mut s);
    println!("{s}\n");
    let wgsl = generate(s.kernel()).expect("codegen");
    println!("{}", wgsl.source);
    for stage in &wgsl.stages {
        println!("// {stage:?}");
    }
}
