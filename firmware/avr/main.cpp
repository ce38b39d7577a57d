// main.cpp: what the Arduino core's main does for a sketch, for the plain
// avr-gcc build (firmware/Makefile), which has no Arduino core: setup once,
// then loop forever. The board layer does all of its own initialisation.
void setup();
void loop();

int main() {
  setup();
  for (;;) loop();
}
