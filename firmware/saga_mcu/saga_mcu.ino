// saga_mcu.ino: reference firmware for the saga-supervisor serial protocol,
// version 1 (docs/SERIAL.md). For an Arduino-class board (Uno, Nano, Mega;
// it also builds for RP2040 and ESP32 cores that provide Servo).
//
// It is deliberately small: it shows every rule of the protocol once. It is
// not built in CI. What CI tests is drivers/sim/mcu, which implements the
// same rules; keep the two in step.
//
// Edit CHANNELS and SUPPLIES for your board. The host must be told each
// servo channel's tolerance (serial.WithTolerance(0.1)): a servo pulse is
// set in whole microseconds, 0.18 degrees apart, and SET_ACK reports the
// value actually applied; likewise PWM (8-bit duty, WithTolerance(0.002)).
//
// Not here: position feedback (telemetry reports the applied value), the
// SUPPLY, OUTPUT and ESTOP fault flags (an e-stop input must hold outputs
// safe and NAK SET with FAULT while active), and a hardware watchdog
// against a hung sketch (add your core's, e.g. avr/wdt.h, if you need one).

#include <Servo.h>
#include <string.h>

// --- configuration ---------------------------------------------------------

const uint32_t BAUD = 115200;
const uint16_t MAX_DURATION_MS = 500;  // watchdog: no valid frame this long -> all outputs safe
const uint16_t TELEMETRY_MS = 100;
const uint8_t WINDOW = 4;              // duplicate cache size = requests the host may have in flight
const uint16_t GAP_MS = 20;            // a pause this long ends any partial frame (>= 30 byte times)

enum Kind : uint8_t { SERVO, PWM_OUT, DIGITAL };

struct Channel {
  uint8_t pin;
  Kind kind;
  int32_t minv, maxv;  // accepted range, thousandths of the unit
  int32_t safe;        // safe value, unless safeDetach
  bool safeDetach;     // the watchdog detaches instead (inert)
};

// Servo in milli-degrees 0..180000; PWM duty 0..1000; digital 0 or 1000.
const Channel CHANNELS[] = {
  {9, SERVO, 0, 180000, 90000, false},
  {10, SERVO, 0, 180000, 90000, false},
  {5, PWM_OUT, 0, 1000, 0, false},
  {7, DIGITAL, 0, 1000, 0, true},
};
const uint8_t NCH = sizeof(CHANNELS) / sizeof(CHANNELS[0]);

struct SupplyPin {
  uint8_t pin;
  uint32_t mvPerCountX1000;  // millivolts per ADC count, times 1000 (divider included)
};
// A0 through a 1:3 divider on a 5 V, 10-bit ADC: 5000 * 3 / 1023 = 14.663 mV/count.
const SupplyPin SUPPLIES[] = {{A0, 14663}};
const uint8_t NSUP = sizeof(SUPPLIES) / sizeof(SUPPLIES[0]);

// --- protocol constants (docs/SERIAL.md) -----------------------------------

const uint8_t VERSION = 1, SYNC = 0xA5, MAX_PAYLOAD = 200;
const uint8_t T_HELLO = 0x01, T_SET = 0x02, T_HALT = 0x03, T_PING = 0x04;
const uint8_t T_HELLO_ACK = 0x81, T_SET_ACK = 0x82, T_HALT_ACK = 0x83, T_PONG = 0x84,
              T_TELEMETRY = 0xA0, T_NAK = 0xFF;
const uint8_t NAK_BAD_CHANNEL = 1, NAK_RANGE = 2, NAK_MALFORMED = 3, NAK_UNSUPPORTED = 4,
              NAK_NO_SESSION = 5, NAK_VERSION = 6;
const uint16_t F_WATCHDOG = 1, F_RESET = 2;
const uint8_t FLAG_DETACHED = 1;

// --- state -----------------------------------------------------------------

Servo servos[NCH];
int32_t applied[NCH];  // the value each output was last driven to
bool detached[NCH];

uint16_t faults = F_RESET;  // set at power-on until the first HELLO
bool session = false;
uint8_t expected;           // the next in-order sequence number
// Every time below is the loop's one reading of millis(): comparing a newer
// reading against an older "now" would wrap around as unsigned and fire the
// watchdog at once.
uint32_t now, lastValidMs, lastTelemetryMs, lastByteMs;
uint8_t telemetrySeq;

struct Cached {          // the answer to one recent request
  bool valid;
  uint8_t seq;
  uint16_t requestCrc;   // the request frame's CRC stands for its type and payload
  uint8_t len;
  uint8_t frame[12];     // the longest answer: 6 header/CRC bytes + 6 payload bytes
};
Cached cache[WINDOW];

uint8_t rx[MAX_PAYLOAD + 6];
uint8_t rxN;

// --- CRC-16/CCITT-FALSE: poly 0x1021, init 0xFFFF; "123456789" -> 0x29B1 -

uint16_t crc16(uint16_t crc, const uint8_t *p, uint8_t n) {
  while (n--) {
    crc ^= (uint16_t)(*p++) << 8;
    for (uint8_t i = 0; i < 8; i++) crc = (crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1;
  }
  return crc;
}

void put32(uint8_t *p, int32_t v) {
  for (uint8_t i = 0; i < 4; i++) p[i] = (uint32_t)v >> (8 * i);
}
int32_t get32(const uint8_t *p) {
  return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

// build writes a frame into out and returns its length.
uint8_t build(uint8_t *out, uint8_t seq, uint8_t type, const uint8_t *p, uint8_t n) {
  out[0] = SYNC; out[1] = n; out[2] = seq; out[3] = type;
  memcpy(out + 4, p, n);
  uint16_t crc = crc16(0xFFFF, out + 1, 3 + n);
  out[4 + n] = crc & 0xFF;
  out[5 + n] = crc >> 8;
  return n + 6;
}

void send(uint8_t seq, uint8_t type, const uint8_t *p, uint8_t n) {
  uint8_t f[MAX_PAYLOAD + 6];
  Serial.write(f, build(f, seq, type, p, n));
}

// --- outputs -----------------------------------------------------------------

// drive sets channel ch to v (already range-checked) and returns the value
// actually applied after the hardware's quantisation.
int32_t drive(uint8_t ch, int32_t v) {
  const Channel &c = CHANNELS[ch];
  detached[ch] = false;
  switch (c.kind) {
    case SERVO: {
      int32_t us = 1000 + (v + 90) / 180;  // 0..180000 milli-degrees -> 1000..2000 us, rounded
      if (!servos[ch].attached()) servos[ch].attach(c.pin);
      servos[ch].writeMicroseconds(us);
      return applied[ch] = (us - 1000) * 180;
    }
    case PWM_OUT: {
      int32_t duty = (v * 255 + 500) / 1000;
      analogWrite(c.pin, duty);
      return applied[ch] = (duty * 1000 + 127) / 255;
    }
    default:
      digitalWrite(c.pin, v ? HIGH : LOW);
      return applied[ch] = v ? 1000 : 0;
  }
}

// detach makes channel ch inert: no servo pulses (the servo stays about
// where it was, so its value is kept), PWM and digital low (value 0: report
// what the output is, not what it was).
void detach(uint8_t ch) {
  if (CHANNELS[ch].kind == SERVO) {
    servos[ch].detach();
  } else {
    digitalWrite(CHANNELS[ch].pin, LOW);
    applied[ch] = 0;
  }
  detached[ch] = true;
}

void goSafe() {
  for (uint8_t ch = 0; ch < NCH; ch++) {
    if (CHANNELS[ch].safeDetach) detach(ch);
    else drive(ch, CHANNELS[ch].safe);
  }
}

// --- requests ----------------------------------------------------------------

// answer builds the answer to an in-order request into a.
void answer(Cached &a, uint8_t seq, uint8_t type, const uint8_t *p, uint8_t n) {
  uint8_t q[6];
  switch (type) {
    case T_PING:
      if (n != 0) break;
      q[0] = faults & 0xFF; q[1] = faults >> 8;
      a.len = build(a.frame, seq, T_PONG, q, 2);
      return;
    case T_SET:
    case T_HALT: {
      if (n != (type == T_SET ? 5 : 1)) break;
      uint8_t ch = p[0];
      q[1] = ch;
      if (ch >= NCH) { q[0] = NAK_BAD_CHANNEL; a.len = build(a.frame, seq, T_NAK, q, 2); return; }
      if (type == T_SET) {
        int32_t v = get32(p + 1);
        const Channel &c = CHANNELS[ch];
        if (v < c.minv || v > c.maxv || (c.kind == DIGITAL && v != 0 && v != 1000)) {
          q[0] = NAK_RANGE; a.len = build(a.frame, seq, T_NAK, q, 2); return;
        }
        drive(ch, v);
      } else {
        detach(ch);
      }
      q[0] = ch; q[1] = detached[ch] ? FLAG_DETACHED : 0; put32(q + 2, applied[ch]);
      a.len = build(a.frame, seq, type | 0x80, q, 6);
      return;
    }
    default:
      q[0] = NAK_UNSUPPORTED; q[1] = type;
      a.len = build(a.frame, seq, T_NAK, q, 2);
      return;
  }
  q[0] = NAK_MALFORMED; q[1] = 0;
  a.len = build(a.frame, seq, T_NAK, q, 2);
}

void handle(uint8_t seq, uint8_t type, const uint8_t *p, uint8_t n, uint16_t frameCrc) {
  uint8_t q[10];
  if (type & 0x80) return;  // an MCU type: our own frame echoed back
  if (type == T_HELLO) {
    if (n != 1) { q[0] = NAK_MALFORMED; q[1] = 0; send(seq, T_NAK, q, 2); return; }
    if (p[0] != VERSION) { q[0] = NAK_VERSION; q[1] = VERSION; send(seq, T_NAK, q, 2); return; }
    uint16_t seen = faults;
    faults &= ~(F_WATCHDOG | F_RESET);
    session = true;
    expected = seq + 1;
    for (uint8_t i = 0; i < WINDOW; i++) cache[i].valid = false;
    lastValidMs = now;
    q[0] = VERSION; q[1] = NCH; q[2] = NSUP; q[3] = WINDOW;
    q[4] = MAX_DURATION_MS & 0xFF; q[5] = MAX_DURATION_MS >> 8;
    q[6] = TELEMETRY_MS & 0xFF; q[7] = TELEMETRY_MS >> 8;
    q[8] = seen & 0xFF; q[9] = seen >> 8;
    send(seq, T_HELLO_ACK, q, 10);
    return;
  }
  if (!session) { q[0] = NAK_NO_SESSION; q[1] = 0; send(seq, T_NAK, q, 2); return; }
  Cached &c = cache[seq % WINDOW];
  uint8_t d = seq - expected;
  if (d == 0) {                       // in order: act once, remember the answer
    answer(c, seq, type, p, n);
    c.valid = true; c.seq = seq; c.requestCrc = frameCrc;
    expected++;
    lastValidMs = now;
    Serial.write(c.frame, c.len);
  } else if (d >= 256 - WINDOW && c.valid && c.seq == seq && c.requestCrc == frameCrc) {
    lastValidMs = now;           // a retransmission: answer again, do not act again
    Serial.write(c.frame, c.len);
  }                                   // otherwise ahead of a lost request: drop it
}

// --- receiving (docs/SERIAL.md section 2) -----------------------------------

void dropFront(uint8_t n) {
  memmove(rx, rx + n, rxN - n);
  rxN -= n;
}

// decode takes every complete valid frame from rx. After a pause (gap) no
// partial frame is waited for: it cannot be real.
void decode(bool gap) {
  for (;;) {
    uint8_t i = 0;
    while (i < rxN && rx[i] != SYNC) i++;
    dropFront(i);
    if (rxN < 2) { if (gap && rxN == 1) dropFront(1); return; }
    uint8_t n = rx[1];
    if (n > MAX_PAYLOAD) { dropFront(1); continue; }
    if (rxN < n + 6) { if (gap) { dropFront(1); continue; } return; }
    uint16_t crc = rx[4 + n] | (uint16_t)rx[5 + n] << 8;
    if (crc16(0xFFFF, rx + 1, 3 + n) != crc) { dropFront(1); continue; }
    handle(rx[2], rx[3], rx + 4, n, crc);
    dropFront(n + 6);
  }
}

void sendTelemetry() {
  uint8_t q[4 + 4 * NSUP + 5 * NCH], *w = q;
  *w++ = faults & 0xFF; *w++ = faults >> 8;
  *w++ = NSUP;
  for (uint8_t i = 0; i < NSUP; i++, w += 4)
    put32(w, (int32_t)(((uint32_t)analogRead(SUPPLIES[i].pin) * SUPPLIES[i].mvPerCountX1000 + 500) / 1000));
  *w++ = NCH;
  for (uint8_t ch = 0; ch < NCH; ch++, w += 4) {
    *w++ = detached[ch] ? FLAG_DETACHED : 0;
    put32(w, applied[ch]);  // no position feedback on this board: the applied value
  }
  send(telemetrySeq++, T_TELEMETRY, q, w - q);
}

// --- main --------------------------------------------------------------------

void setup() {
  for (uint8_t ch = 0; ch < NCH; ch++) pinMode(CHANNELS[ch].pin, OUTPUT);
  goSafe();  // outputs safe before anything else
  Serial.begin(BAUD);
}

void loop() {
  now = millis();
  while (Serial.available() && rxN < sizeof(rx)) {
    rx[rxN++] = Serial.read();
    lastByteMs = now;
  }
  decode(rxN > 0 && now - lastByteMs >= GAP_MS);

  if (session && now - lastValidMs > MAX_DURATION_MS) {  // the MCU's watchdog
    goSafe();
    faults |= F_WATCHDOG;
    session = false;
  }
  if (now - lastTelemetryMs >= TELEMETRY_MS) {
    lastTelemetryMs = now;
    sendTelemetry();
  }
}
