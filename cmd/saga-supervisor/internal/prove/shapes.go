package prove

import "slices"

// Shape is one way a step can break. arm is called just before the step
// is sent; it injects the fault on the step's device (drivers/sim Faults)
// and, through the process, what happens at and after the effect.
type Shape struct {
	Name  string `json:"name"`
	About string `json:"about"`
	arm   func(pr *prober, p *process, k int)
}

// baseShapes are the shapes every step is broken in.
var baseShapes = []Shape{
	{Name: "driver-refuses", About: "the driver refuses the step: an error that promises the output unchanged (actuators.ErrNotApplied)",
		arm: func(pr *prober, p *process, k int) { p.rig.deviceOf(pr, k).faults.FailOnNth(1) }},
	{Name: "timeout-applied", About: "the driver times out after the effect happened (in doubt)",
		arm: func(pr *prober, p *process, k int) {
			p.rig.deviceOf(pr, k).faults.HangNext(true)
			p.arm(effectHook{hang: true})
		}},
	{Name: "timeout-lost", About: "the driver times out and the effect never happened (in doubt)",
		arm: func(pr *prober, p *process, k int) {
			p.rig.deviceOf(pr, k).faults.HangNext(false)
			p.arm(effectHook{hang: true})
		}},
	{Name: "link-lost", About: "the link drops during the step (the command got through) and is back for the unwind",
		arm: func(pr *prober, p *process, k int) {
			f := p.rig.deviceOf(pr, k).faults
			f.LoseLink(true)
			p.arm(effectHook{after: f.RestoreLink})
		}},
	{Name: "crash-before-effect", About: "the supervisor dies after the intent is journaled, before the effect; a new process recovers",
		arm: func(pr *prober, p *process, k int) { p.arm(effectHook{crash: true}) }},
	{Name: "crash-after-effect", About: "the supervisor dies after the effect, before its outcome is journaled; a new process recovers",
		arm: func(pr *prober, p *process, k int) { p.arm(effectHook{crash: true, applied: true}) }},
	{Name: "compensation-retried", About: "the step times out (applied); every compensation fails once, then succeeds on retry",
		arm: func(pr *prober, p *process, k int) {
			p.rig.deviceOf(pr, k).faults.HangNext(true)
			p.arm(effectHook{hang: true, after: func() {
				for _, d := range p.rig.devices {
					d.faults.FailOnNth(1)
				}
			}})
		}},
}

// permanentShape is added by --permanent-compensation-failures. It is
// expected DIRTY: it checks that the engine admits what it could not undo.
var permanentShape = Shape{Name: "compensation-fails", About: "the step times out (applied); every compensation back to a prior fails, always (expected DIRTY)",
	arm: func(pr *prober, p *process, k int) {
		p.rig.deviceOf(pr, k).faults.HangNext(true)
		// The priors come from the dry run: the values the unwind drives
		// each actuator back to. Failing exactly those lets a safe value
		// that differs from them still be reached, as with a joint jammed
		// on its way back.
		priors := map[string][]float64{}
		for j := 0; j < k; j++ {
			a := pr.sc.Steps[j].Actuator
			priors[a] = append(priors[a], pr.dry[j].Prior)
		}
		p.arm(effectHook{hang: true, after: func() {
			for name, ps := range priors {
				p.rig.devices[name].faults.FailWhen(func(v float64) bool { return slices.Contains(ps, v) })
			}
		}})
	}}

// Shapes returns the shapes every step is broken in, in the order prove
// runs them.
func Shapes() []Shape { return slices.Clone(baseShapes) }

// PermanentShape returns the shape --permanent-compensation-failures adds.
func PermanentShape() Shape { return permanentShape }
