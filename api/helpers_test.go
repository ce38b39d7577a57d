package api

import "math"

func nan() float64 { return math.NaN() }

func ptr(v float64) *float64 { return &v }
