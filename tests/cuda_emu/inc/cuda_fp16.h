/* Emulator: IEEE binary16 conversions by the CPU's F16C instructions (round to nearest even). */
#pragma once
#include <cstdint>
#include <immintrin.h>
struct __half_raw {
    unsigned short x;
};
struct __half {
    unsigned short __x;
    __half() = default;
    __half(const __half_raw &r) : __x(r.x) {}
    operator __half_raw() const {
        __half_raw r;
        r.x = __x;
        return r;
    }
};
inline float __half2float(__half h) {
    return _cvtsh_ss(h.__x);
}
inline __half __float2half_rn(float f) {
    __half_raw r;
    r.x = (unsigned short)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return __half(r);
}
inline unsigned short __half_as_ushort(__half h) {
    return h.__x;
}
inline __half __ushort_as_half(unsigned short u) {
    __half_raw r;
    r.x = u;
    return __half(r);
}
