package flush

// CRC-32 (IEEE) of a run of zero bytes without reading them.
//
// The reflected CRC register is a polynomial over GF(2) of degree < 32 with
// bit 31 holding the coefficient of x^0. Feeding one zero bit multiplies it by
// x modulo the CRC polynomial, so n zero bytes multiply it by x^(8n) mod P,
// which square-and-multiply computes in O(log n) products.

// crcPoly is the IEEE CRC-32 polynomial without its x^32 term, reflected.
const crcPoly = 0xedb88320

// gfMulMod returns a*b mod P for polynomials in reflected order.
func gfMulMod(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; a != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
			a ^= m
		}
		if b&1 != 0 {
			b = b>>1 ^ crcPoly
		} else {
			b >>= 1
		}
	}
	return p
}

// xPow8n returns x^(8n) mod P in reflected order.
func xPow8n(n uint64) uint32 {
	r := uint32(1) << 31    // x^0
	base := uint32(1) << 23 // x^8
	for n != 0 {
		if n&1 != 0 {
			r = gfMulMod(r, base)
		}
		n >>= 1
		if n != 0 {
			base = gfMulMod(base, base)
		}
	}
	return r
}

// crcZeros returns the IEEE CRC-32 of the data whose CRC is crc followed by
// n zero bytes; n <= 0 leaves crc unchanged.
func crcZeros(crc uint32, n int64) uint32 {
	if n <= 0 {
		return crc
	}
	return ^gfMulMod(^crc, xPow8n(uint64(n)))
}
