/* Emulator: bfloat16 conversions (round to nearest even; NaN -> 0x7fff as CUDA's cvt.rn.bf16.f32).
 */
#pragma once
#include <cstdint>
#include <cstring>
struct __nv_bfloat16_raw {
    unsigned short x;
};
struct __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(const __nv_bfloat16_raw &r) : __x(r.x) {}
};
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    __nv_bfloat16_raw r;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        r.x = 0x7fff;
    } else {
        const uint32_t lsb = (u >> 16) & 1u;
        r.x = (unsigned short)((u + 0x7fffu + lsb) >> 16);
    }
    return __nv_bfloat16(r);
}
inline float __bfloat162float(__nv_bfloat16 h) {
    uint32_t u = (uint32_t)h.__x << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) {
    return h.__x;
}
