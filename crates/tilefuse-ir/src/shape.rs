//! Static shapes and numpy broadcasting.

/// A static tensor shape; `[]` is a scalar.
pub type Shape = Vec<usize>;

/// Number of elements of a shape (1 for a scalar).
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Row-major (C order) strides of a shape, in elements.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

/// The numpy broadcast of two shapes, or `None` when they are incompatible.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Shape> {
    let rank = a.len().max(b.len());
    let dim = |s: &[usize], i: usize| {
        let pad = rank - s.len();
        if i < pad { 1 } else { s[i - pad] }
    };
    (0..rank)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// Whether `from` broadcasts to exactly `to` under numpy rules.
pub fn broadcasts_to(from: &[usize], to: &[usize]) -> bool {
    broadcast_shapes(from, to).is_some_and(|s| s == to)
}

/// Maps a flat index of the broadcast shape `to` onto the flat index of an
/// operand of shape `from` that broadcasts to it.
pub fn broadcast_index(flat: usize, to: &[usize], from: &[usize]) -> usize {
    let pad = to.len() - from.len();
    let from_strides = strides(from);
    let mut rest = flat;
    let mut index = 0;
    for (axis, &extent) in to.iter().enumerate().rev() {
        let coord = rest % extent.max(1);
        rest /= extent.max(1);
        if axis >= pad && from[axis - pad] != 1 {
            index += coord * from_strides[axis - pad];
        }
    }
    index
}

/// Formats a shape the way numpy prints it: `(4, 4)`, `(3,)`, `()`.
pub fn format_shape(shape: &[usize]) -> String {
    match shape {
        [one] => format!("({one},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting_follows_numpy() {
        assert_eq!(broadcast_shapes(&[4, 1], &[3]), Some(vec![4, 3]));
        assert_eq!(broadcast_shapes(&[], &[2, 2]), Some(vec![2, 2]));
        assert_eq!(broadcast_shapes(&[2, 3], &[3, 2]), None);
        assert!(broadcasts_to(&[1, 3], &[5, 3]));
        assert!(!broadcasts_to(&[5, 3], &[1, 3]));
    }

    #[test]
    fn broadcast_index_repeats_size_one_axes() {
        // (2, 1) broadcast to (2, 3): every column reads row r.
        let idx: Vec<_> = (0..6)
            .map(|i| broadcast_index(i, &[2, 3], &[2, 1]))
            .collect();
        assert_eq!(idx, vec![0, 0, 0, 1, 1, 1]);
        let idx: Vec<_> = (0..6).map(|i| broadcast_index(i, &[2, 3], &[3])).collect();
        assert_eq!(idx, vec![0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn strides_are_row_major() {
        assert_eq!(strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(strides(&[]), Vec::<usize>::new());
        assert_eq!(format_shape(&[3]), "(3,)");
        assert_eq!(format_shape(&[2, 3]), "(2, 3)");
    }
}
