/*
 * saga_mcu.h: the saga_mcu library — the protocol core (saga_core.h) and
 * the board layer of the MCU it is built for. A sketch includes this one
 * header and calls the board's setup and loop.
 */
#ifndef SAGA_MCU_H
#define SAGA_MCU_H

#include "saga_core.h"

#if defined(__AVR_ATmega328P__)
#include "saga_atmega328p.h"
#define saga_setup saga_atmega328p_setup
#define saga_loop saga_atmega328p_loop
#elif defined(__AVR__) || defined(ARDUINO)
#error "saga_mcu has a board layer for the ATmega328P (Uno, Nano) only: write one for this MCU (docs/SERIAL.md, The reference firmware)"
#endif

#endif
