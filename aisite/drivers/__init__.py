"""What aisite knows of each kind of device it drives, one module per kind (Metal3's BMC RegisterFactory, as
Python modules): switch operating systems (`switches`) and BMC protocols (`bmcs`). The model, plan, checks and
inventory read these registries; adding a switch OS is one module here plus its role."""
