// SPDX-License-Identifier: BSD-3-Clause
//! The generated length rules (`localmap_sys::lengths`, from api/localmap.api) and the
//! helpers that check a call's arrays against them (`length_mismatch`, `check_lengths`). No MPI,
//! no C calls.
use localmap_sys::{check_lengths, length_mismatch, lengths, Len, Of};

/// A call's arguments: (name, what, value); a name not listed reads as None (a NULL handle).
fn args(table: &'static [(&'static str, Of, i64)]) -> impl Fn(&str, Of) -> Option<i64> {
    move |name, of| table.iter().find(|(n, o, _)| *n == name && *o == of).map(|t| t.2)
}

#[test]
fn rules_read_as_the_description_spells_them() {
    let zeros = lengths::lm_dist_tensor_zeros;
    assert_eq!(zeros.len(), 2);
    assert_eq!((zeros[1].name, zeros[1].index, zeros[1].null_ok), ("placements", 6, false));
    assert_eq!(zeros[1].dims, &[Len::Ndim("mesh")]);
    assert_eq!(lengths::of("lm_dist_tensor_zeros"), zeros);
    assert!(lengths::of("lm_mesh_destroy").is_empty() && lengths::of("no_such_function").is_empty());
    let reshard = lengths::of("lm_dist_tensor_reshard");
    let p = reshard.iter().find(|a| a.name == "placements").unwrap();
    let rules: Vec<String> = p.dims.iter().map(|r| r.to_string()).collect();
    assert_eq!(rules, ["dst_mesh.ndim|src.mesh.ndim"]);
    let group = lengths::of("lm_reshard_group_execute");
    let rules: Vec<String> = group[0].dims.iter().map(|r| r.to_string()).collect();
    assert_eq!((group[0].name, rules), ("src", vec!["n".to_string()]));
    assert_eq!(lengths::of("lm_local_map")[3].dims[1].to_string(), "*");
    assert_eq!(lengths::lm_dist_tensor_from_scalapack[0].dims, &[Len::Count(9)]);
}

#[test]
fn placements_must_have_the_mesh_ndim() {
    let call = args(&[("mesh", Of::Ndim, 2), ("ndim", Of::Value, 3)]);
    let ok = |n: &str, i: Option<usize>| match (n, i) {
        ("placements", None) => Some(2),
        ("global_shape", None) => Some(3),
        _ => None,
    };
    assert_eq!(check_lengths("lm_dist_tensor_zeros", &call, &ok), Ok(()));
    let short = |n: &str, i: Option<usize>| if n == "placements" && i.is_none() { Some(1) } else { None };
    assert_eq!(check_lengths("lm_dist_tensor_zeros", &call, &short),
               Err("lm_dist_tensor_zeros: placements has 1 entries, but mesh.ndim = 2".to_string()));
}

#[test]
fn either_rule_falls_back_where_the_handle_is_null() {
    let three = |n: &str, i: Option<usize>| if n == "placements" && i.is_none() { Some(3) } else { None };
    // dst_mesh NULL: the source's mesh ndim (3) rules.
    let call = args(&[("src", Of::MeshNdim, 3), ("src", Of::Ndim, 2)]);
    assert_eq!(check_lengths("lm_dist_tensor_reshard", &call, &three), Ok(()));
    // dst_mesh given (ndim 1): it rules.
    let call = args(&[("src", Of::MeshNdim, 3), ("dst_mesh", Of::Ndim, 1)]);
    let e = check_lengths("lm_dist_tensor_reshard", &call, &three).unwrap_err();
    assert_eq!(e, "lm_dist_tensor_reshard: placements has 3 entries, but dst_mesh.ndim|src.mesh.ndim = 1");
}

#[test]
fn arrays_of_placements_are_checked_element_by_element() {
    let call = args(&[("mesh", Of::Ndim, 2), ("nin", Of::Value, 2), ("nout", Of::Value, 1)]);
    let lens = |n: &str, i: Option<usize>| match (n, i) {
        ("inputs", None) | ("in_placements", None) => Some(2),
        ("in_placements", Some(0)) => Some(2),
        ("in_placements", Some(1)) => Some(1),
        ("out_shapes", None) => Some(1),
        ("out_shapes", Some(_)) => Some(5), // `*`: each its own, not checked
        _ => None,
    };
    let e = check_lengths("lm_local_map", &call, &lens).unwrap_err();
    assert_eq!(e, "lm_local_map: in_placements[1] has 1 entries, but mesh.ndim = 2");
    let wrong_n = |n: &str, i: Option<usize>| if n == "out_placements" && i.is_none() { Some(2) } else { None };
    assert!(check_lengths("lm_local_map_ex", &call, &wrong_n).unwrap_err().contains("out_placements has 2 entries, but nout = 1"));
}

#[test]
fn a_mismatch_names_the_argument_the_element_and_the_rule() {
    let call = args(&[("mesh", Of::Ndim, 2), ("nin", Of::Value, 2), ("nout", Of::Value, 0)]);
    let lens = |n: &str, i: Option<usize>| match (n, i) {
        ("in_placements", None) => Some(2),
        ("in_placements", Some(1)) => Some(3),
        _ => None,
    };
    let m = length_mismatch("lm_local_map", &call, &lens).unwrap();
    assert_eq!((m.arg.name, m.element, m.got, m.want), ("in_placements", Some(1), 3, 2));
    assert_eq!(*m.rule, Len::Ndim("mesh"));
    let outer = |n: &str, i: Option<usize>| if n == "in_placements" && i.is_none() { Some(1) } else { None };
    let m = length_mismatch("lm_local_map", &call, &outer).unwrap();
    assert_eq!((m.element, m.got, m.want, *m.rule), (None, 1, 2, Len::Arg("nin")));
    assert_eq!(length_mismatch("lm_mesh_destroy", &call, &lens), None);
}
