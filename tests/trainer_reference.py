# PyTorch reference for tests/test_trainer.cpp: LeNet-5 with the weights of the ONNX file, trained
# on Fashion-MNIST in file order, batch 16, SGD (lr 0.01, momentum 0.9) or AdamW (lr 1e-3), then
# evaluated on the first NTEST test images; CLIP (above 0) clips each step's gradients to that
# global norm (torch.nn.utils.clip_grad_norm_). The test's golden numbers come from:
#   /usr/bin/python3 tests/trainer_reference.py 400 1000 models/lenet5_op17.onnx [sgd|adamw] [CLIP]
import sys, gzip, numpy as np, torch, torch.nn as nn, onnx
from onnx import numpy_helper
torch.set_num_threads(2)
steps = int(sys.argv[1]); ntest = int(sys.argv[2]); model = sys.argv[3]
opt_kind = sys.argv[4] if len(sys.argv) > 4 else "sgd"
clip = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
class LeNet5(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, kernel_size=5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, kernel_size=5), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
            nn.Linear(84, 10))
    def forward(self, x): return self.classifier(self.features(x))
m = LeNet5()
inits = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in onnx.load(model).graph.initializer}
sd = m.state_dict()
for k in sd: sd[k] = inits[k]
m.load_state_dict(sd)
d = '/usr/share/datasets/fashion-mnist/'
def load(f, off): return np.frombuffer(gzip.open(d + f).read()[off:], dtype=np.uint8)
xtr = torch.from_numpy(load('train-images-idx3-ubyte.gz', 16).reshape(-1, 1, 28, 28).astype(np.float32) / 255)
ytr = torch.from_numpy(load('train-labels-idx1-ubyte.gz', 8).astype(np.int64))
xte = torch.from_numpy(load('t10k-images-idx3-ubyte.gz', 16).reshape(-1, 1, 28, 28).astype(np.float32) / 255)[:ntest]
yte = torch.from_numpy(load('t10k-labels-idx1-ubyte.gz', 8).astype(np.int64))[:ntest]
opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9) if opt_kind == "sgd" else torch.optim.AdamW(m.parameters(), lr=1e-3)
lossf = nn.CrossEntropyLoss()
losses = []
clipped = 0
for s in range(steps):
    x = xtr[s * 16:(s + 1) * 16]; y = ytr[s * 16:(s + 1) * 16]
    opt.zero_grad(); l = lossf(m(x), y); l.backward()
    if clip > 0:
        clipped += float(torch.nn.utils.clip_grad_norm_(m.parameters(), clip)) > clip
    opt.step(); losses.append(l.item())
m.eval()
with torch.no_grad():
    z = m(xte); acc = (z.argmax(1) == yte).float().mean().item(); tl = lossf(z, yte).item()
print("first losses", [round(v, 5) for v in losses[:5]])
print("last losses", [round(v, 5) for v in losses[-3:]])
if steps > 150: print("loss100 %.5f loss150 %.5f" % (losses[100], losses[150]))
if clip > 0: print("steps clipped", clipped, "of", steps)
print("mean first20 %.5f last20 %.5f test acc %.4f test loss %.5f" % (np.mean(losses[:20]), np.mean(losses[-20:]), acc, tl))
