package config

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/saga-supervisor/saga-supervisor/actuators"
)

// Driver is a driver kind as the configuration knows it: the value of
// driver: that names it, the section of its own settings, and how that
// section is checked. Package supervisor/wiring registers one per kind
// (each in a file of its own, which also opens the driver); sim and mqtt,
// whose sections the rest of the configuration depends on, are registered
// by this package.
//
// A driver kind may drive actuators, read supplies or both. Its section is
// written under the actuator or supply, keyed by Key:
//
//	actuators:
//	  pan:
//	    kind: servo
//	    driver: pca9685
//	    pca9685: {bus: "1", channel: 0, ...}
type Driver struct {
	// Name is the value of driver: that selects the kind.
	Name string

	// Kinds are the actuator kinds it drives; none: not an actuator
	// driver.
	Kinds []actuators.Kind
	// Section returns a new actuator section holding its defaults,
	// decoded from the key Name; nil: the driver takes no section.
	// Actuator.Section holds it after Parse (the defaults when the file
	// wrote none).
	Section func() any
	// Check validates one actuator of this driver (Check.Actuator) and its
	// section, and may fill the section's defaults that depend on other
	// settings. Optional.
	Check func(c *Check)
	// Claims lists the hardware one actuator of this driver takes for
	// itself: its pins, channels, bus addresses (see Resource). It is
	// called only when nothing was found wrong with the actuator's driver
	// and section; two claims of one resource are refused. Optional.
	Claims func(c *Check) []Resource

	// Supply: the driver reads supplies.
	Supply bool
	// SupplyKey is the key of its supply section (default Name): INA219
	// and INA226 share "i2c".
	SupplyKey string
	// SupplySection and CheckSupply are Section and Check for supplies.
	SupplySection func() any
	CheckSupply   func(c *Check)
	SupplyClaims  func(c *Check) []Resource
}

// registry holds the driver kinds by name, registered at init.
var registry = struct {
	sync.RWMutex
	drivers map[string]Driver
}{drivers: map[string]Driver{}}

// Register adds a driver kind. It panics on a second kind of the same name
// or a kind that neither drives actuators nor reads supplies: both are
// wiring bugs, found as the program starts.
func Register(d Driver) {
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.drivers[d.Name]; dup {
		panic("config: driver " + d.Name + " registered twice")
	}
	if d.Name == "" || len(d.Kinds) == 0 && !d.Supply {
		panic(fmt.Sprintf("config: driver %q drives no actuator kind and reads no supply", d.Name))
	}
	if d.SupplyKey == "" {
		d.SupplyKey = d.Name
	}
	registry.drivers[d.Name] = d
}

// LookupDriver returns the registered driver kind of that name.
func LookupDriver(name string) (Driver, bool) {
	registry.RLock()
	defer registry.RUnlock()
	d, ok := registry.drivers[name]
	return d, ok
}

// DriverNames returns the registered actuator drivers (supply: false) or
// supply drivers (true), sorted.
func DriverNames(supply bool) []string {
	registry.RLock()
	defer registry.RUnlock()
	var names []string
	for n, d := range registry.drivers {
		if supply && d.Supply || !supply && len(d.Kinds) > 0 {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// sectionFor returns a new section for key under an actuator (supply:
// false) or a supply, from the driver that owns the key.
func sectionFor(key string, supply bool) (any, bool) {
	registry.RLock()
	defer registry.RUnlock()
	for _, name := range sortedKeys(registry.drivers) {
		d := registry.drivers[name]
		switch {
		case !supply && d.Name == key && d.Section != nil:
			return d.Section(), true
		case supply && d.Supply && d.SupplyKey == key && d.SupplySection != nil:
			return d.SupplySection(), true
		}
	}
	return nil, false
}

// sectionKeys lists the section keys of the registered drivers, sorted.
func sectionKeys(supply bool) []string {
	registry.RLock()
	defer registry.RUnlock()
	var keys []string
	for _, d := range registry.drivers {
		switch {
		case !supply && d.Section != nil:
			keys = append(keys, d.Name)
		case supply && d.Supply && d.SupplySection != nil && !slices.Contains(keys, d.SupplyKey):
			keys = append(keys, d.SupplyKey)
		}
	}
	sort.Strings(keys)
	return keys
}

// sections holds the driver sections written under one actuator or
// supply, by key, whatever its driver: Parse refuses those that are not its
// driver's.
type sections map[string]any

// section decodes a driver section: the decoder asks for the value of a
// key that is not one of the struct's own.
func (s *sections) section(key string, supply bool) (reflect.Value, bool) {
	v, ok := sectionFor(key, supply)
	if !ok {
		return reflect.Value{}, false
	}
	if *s == nil {
		*s = sections{}
	}
	(*s)[key] = v
	return reflect.ValueOf(v).Elem(), true
}

// Check is what a driver kind's Check is given: the actuator or supply,
// its section, the whole configuration, and errors placed at the line the
// key was written on. Paths are relative to the actuator or supply:
// "pca9685.channel", "min", "driver".
type Check struct {
	d *decoder
	// Config is the whole configuration, for sections shared with others
	// (mcus:, mqtt:).
	Config *Config
	// Name is the actuator's or supply's name; exactly one of Actuator and
	// Supply is set.
	Name     string
	Actuator *Actuator
	Supply   *Supply
	// Section is the driver's section (its defaults if none was written).
	Section any

	path string // "actuators.<name>" or "supplies.<name>"
}

// Path returns the dotted path of rel: "actuators.pan.pca9685.channel".
func (c *Check) Path(rel string) string { return join(c.path, rel) }

// Set reports whether rel was written in the file.
func (c *Check) Set(rel string) bool { return c.d.set(c.Path(rel)) }

// OK reports whether every rel decoded, so a check on them means
// something: a value that did not decode has been reported already.
func (c *Check) OK(rel ...string) bool {
	for _, r := range rel {
		if !c.d.ok(c.Path(r)) {
			return false
		}
	}
	return true
}

// Errorf refuses the configuration at rel (or, if rel was not written, at
// the nearest enclosing key that was).
func (c *Check) Errorf(rel, format string, args ...any) {
	c.d.errorf(c.Path(rel), format, args...)
}

// Warnf records something allowed but discouraged at rel: check-config
// and the daemon's start-up print it, and the configuration stays valid.
func (c *Check) Warnf(rel, format string, args ...any) {
	c.d.warnf(c.Path(rel), format, args...)
}

// Claim takes a resource — a board's channel, a bus address, a topic — for
// the key rel of this actuator or supply, and reports who had it first: ok
// is false when another actuator or supply claimed it, and by is that
// claim's path ("actuators.elbow.mcu.channel"). Claims made under the same
// actuator never conflict.
func (c *Check) Claim(resource, rel string) (by string, ok bool) {
	first, taken := c.d.claims[resource]
	if !taken {
		c.d.claims[resource] = c.Path(rel)
		return "", true
	}
	return first, strings.HasPrefix(first, c.path+".")
}

// Board returns the board the configuration is for.
func (c *Check) Board() Board { return c.Config.HostBoard() }

// Owner returns the actuator or supply of a path Claim returned:
// "actuators.elbow" of "actuators.elbow.mcu.channel".
func Owner(path string) string {
	parts := strings.SplitN(path, ".", 3)
	if len(parts) < 2 {
		return path
	}
	return parts[0] + "." + parts[1]
}

// checkDriver checks an actuator's (supply: false) or a supply's driver
// and the sections written under it, then runs the driver's own check.
func (d *decoder) checkDriver(c *Config, path, name string, a *Actuator, s *Supply) {
	supply := s != nil
	driver, written := "", sections(nil)
	if supply {
		driver, written = s.Driver, s.sections
	} else {
		driver, written = a.Driver, a.sections
	}
	known := DriverNames(supply)
	if !d.validateDriver(path, driver, known) {
		return
	}
	drv, _ := LookupDriver(driver)
	key, check, claims := drv.Name, drv.Check, drv.Claims
	if supply {
		key, check, claims = drv.SupplyKey, drv.CheckSupply, drv.SupplyClaims
	}
	for _, k := range sortedKeys(written) {
		if k == key {
			continue
		}
		var users []string
		for _, n := range DriverNames(supply) {
			o, _ := LookupDriver(n)
			if supply && o.SupplyKey == k || !supply && o.Name == k {
				users = append(users, n)
			}
		}
		if len(users) == 1 {
			d.errorf(path+"."+k, "%s settings apply to driver: %s only, not %s", k, users[0], driver)
		} else {
			d.errorf(path+"."+k, "%s settings apply to drivers %s only, not %s", k, strings.Join(users, " and "), driver)
		}
	}
	if !supply && d.ok(path+".kind") && a.Kind != "" && !slices.Contains(drv.Kinds, a.Kind) {
		kinds := make([]string, len(drv.Kinds))
		for i, k := range drv.Kinds {
			kinds[i] = string(k)
		}
		d.errorf(path+".driver", "driver: %s drives %s actuators, not a %s", driver, orList(kinds), a.Kind)
		return
	}
	chk := &Check{d: d, Config: c, Name: name, Actuator: a, Supply: s, path: path}
	if supply {
		chk.Section = s.Section
	} else {
		chk.Section = a.Section
	}
	if check != nil {
		check(chk)
	}
	// A section that did not decode or check holds defaults where the file
	// said something else: its claims would be conflicts of values never
	// written.
	if claims != nil && !d.refused(path) {
		d.claim(path, claims(chk)...)
	}
}

// refused reports whether an error was found at path or under it.
func (d *decoder) refused(path string) bool {
	for _, e := range d.errs {
		if e.Path == path || strings.HasPrefix(e.Path, path+".") {
			return true
		}
	}
	return false
}

// orList joins words as "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// setSection gives an actuator or supply its driver's section: the one
// written, or a new one holding the defaults.
func setSection(driver string, supply bool, written sections) any {
	d, ok := LookupDriver(driver)
	if !ok {
		return nil
	}
	key, fresh := d.Name, d.Section
	if supply {
		key, fresh = d.SupplyKey, d.SupplySection
	}
	if s, ok := written[key]; ok {
		return s
	}
	if fresh == nil {
		return nil
	}
	return fresh()
}

func (a *Actuator) section(key string) (reflect.Value, bool) { return a.sections.section(key, false) }
func (a *Actuator) sectionKeys() []string                    { return sectionKeys(false) }
func (s *Supply) section(key string) (reflect.Value, bool)   { return s.sections.section(key, true) }
func (s *Supply) sectionKeys() []string                      { return sectionKeys(true) }
