//! A bounded text view of a trajectory, for operators and the viewer.
