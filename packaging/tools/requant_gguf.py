#!/usr/bin/env python3
"""Writes a copy of a GGUF model with every 2-D weight stored as another type (F16, BF16, F32 or Q8_0), by the gguf
package's own dequantiser and quantiser: for benchmarks and for comparing weight types (not run in CI).

  PYTHONPATH=/tmp/refpy python3 packaging/tools/requant_gguf.py IN.gguf OUT.gguf F16
"""
import sys

import numpy as np
from gguf import GGUFReader, GGUFWriter, GGUFValueType, GGMLQuantizationType as QT, dequantize, quantize


def main(src, dst, type_name):
    target = QT[type_name]
    r = GGUFReader(src)
    w = GGUFWriter(dst, arch=r.fields['general.architecture'].contents())
    for name, f in r.fields.items():
        if name.startswith('GGUF.') or name == 'general.architecture':
            continue
        vtype = f.types[0]
        if name == 'general.file_type':
            continue
        if vtype == GGUFValueType.ARRAY:
            w.add_key_value(name, f.contents(), vtype, sub_type=f.types[-1])
        else:
            w.add_key_value(name, f.contents(), vtype)
    for t in r.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float32).reshape([int(x) for x in reversed(t.shape)])
        if a.ndim == 2:
            if target in (QT.F32,):
                w.add_tensor(t.name, a)
            elif target == QT.F16:
                w.add_tensor(t.name, a.astype(np.float16))
            else:
                q = quantize(a, target)
                w.add_tensor(t.name, q, raw_shape=q.shape, raw_dtype=target)
        else:
            w.add_tensor(t.name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == '__main__':
    main(*sys.argv[1:4])
