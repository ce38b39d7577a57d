// saga_mcu.ino: the firmware for an Arduino Uno or Nano (ATmega328P) that
// saga-supervisor drives over USB serial, speaking protocol version 1
// (docs/SERIAL.md). All of it is in the saga_mcu library (src/): the
// protocol core, saga_core.c, and the board layer, saga_atmega328p.c.
//
// The pin map and the channel table — kind, pin, polarity, servo
// calibration, range, safe value — are in src/saga_atmega328p.h: edit them
// there for your robot, and write the same channels, polarity and safe
// values in the supervisor's config (docs/HARDWARE.md). The supervisor asks
// the board for its table (DESCRIBE) at start and refuses to run on a
// channel whose kind, polarity or range disagrees with its config.
//
// Build and flash: docs/SERIAL.md, "The reference firmware" (arduino-cli,
// the Arduino IDE, or `make firmware` and avrdude).

#include <saga_mcu.h>

void setup() {
  saga_setup();  // outputs safe, then the watchdog, e-stop, supply and UART
}

void loop() {
  saga_loop();  // feeds the hardware watchdog, runs the protocol
}
